package vet_test

import (
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

// TestShadowJudgesUnderItsOwnPolicy: the shadow's decision on each call is what a checker of the
// shadow policy decides, whatever the active policy decided, and the active decision is left as it
// was.
func TestShadowJudgesUnderItsOwnPolicy(t *testing.T) {
	t.Parallel()
	mustRules := func(rs ...vet.Rule) *vet.RuleSet {
		set, err := vet.CompileRules(rs)
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	schema := map[string][]byte{"fetch": []byte(`{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`)}
	active := vet.Policy{Allowed: map[string]bool{"fetch": true, "shell": true}, Schemas: schema}
	shadows := map[string]vet.Policy{
		"strict": {Allowed: map[string]bool{"fetch": true}, Schemas: schema,
			Rules: mustRules(vet.Rule{ID: "docs", Tool: "fetch", Path: "url", Check: vet.Check{Pattern: "^https://docs\\."}})},
		"audit":  {Allowed: map[string]bool{"fetch": true}, Schemas: schema, Mode: vet.ModeAudit},
		"looser": {Allowed: map[string]bool{"fetch": true, "shell": true, "deploy": true}, Schemas: schema},
	}
	calls := []*vet.Call{
		{ID: "1", Name: "fetch", Args: []byte(`{"url":"https://docs.example.com/a"}`)},
		{ID: "2", Name: "fetch", Args: []byte(`{"url":"https://evil.net/"}`)},
		{ID: "3", Name: "shell", Args: []byte(`{"cmd":"ls"}`)},
		{ID: "4", Name: "deploy", Args: []byte(`{}`)},
		{ID: "5", Name: "fetch", Args: []byte(`{"url":1}`)},
		{ID: "6", Name: "fetch", Args: []byte(`{"url":"a","URL":"b"}`)},
		{ID: "", Name: "fetch", Args: []byte(`{"url":"https://docs.example.com/a"}`)},
		{ID: "1", Name: "fetch", Args: []byte(`{"url":"https://docs.example.com/b"}`)},
	}
	for name, sp := range shadows {
		ac := vet.NewChecker(active)
		sh := vet.NewShadow(sp)
		ref := vet.NewChecker(sp)
		for i, c := range calls {
			a := ac.Vet(c)
			before := a
			got := sh.Judge(a)
			want := ref.Vet(c)
			if got.Verdict != want.Verdict || got.Reason != want.Reason || got.Rule != want.Rule {
				t.Errorf("%s, call %d: shadow %s %q %q, a checker of its policy %s %q %q", name, i, got.Verdict, got.Reason, got.Rule, want.Verdict, want.Reason, want.Rule)
			}
			if a.Verdict != before.Verdict || a.Reason != before.Reason {
				t.Errorf("%s, call %d: the active decision changed", name, i)
			}
		}
	}
}
