package flow_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// ruleCase is one file of testdata/rules/KIND/: a spec, a conversation in the neutral form, and the
// calls the model then makes in order, each with the decision it must get. A new rule kind is a
// folder of such files.
type ruleCase struct {
	Description  string          `json:"description"`
	Spec         json.RawMessage `json:"spec"`
	Conversation []flowtest.Turn `json:"conversation"`
	Calls        []struct {
		Tool   string          `json:"tool"`
		Args   json.RawMessage `json:"args"`
		Expect string          `json:"expect"` // allowed, blocked or held
		Kind   string          `json:"kind"`   // the first decision's kind
		Rule   string          `json:"rule"`   // the first decision's rule
		Reason string          `json:"reason"` // a part of the first decision's reason
	} `json:"calls"`
}

// TestRuleCases runs every case file of testdata/rules: each call's verdict, decision kind, rule
// and reason, and no reason quoting an argument value.
func TestRuleCases(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("testdata", "rules", "*", "*.json"))
	if err != nil || len(files) < 10 {
		t.Fatalf("%d case files (%v)", len(files), err)
	}
	kinds := map[string]bool{}
	for _, f := range files {
		kinds[filepath.Base(filepath.Dir(f))] = true
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rc ruleCase
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var spec flow.Spec
		if err := json.Unmarshal(rc.Spec, &spec); err != nil {
			t.Fatalf("%s: spec: %v", f, err)
		}
		p, err := flow.Compile(spec)
		if err != nil {
			t.Fatalf("%s: compile: %v", f, err)
		}
		clk := &clock{time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}
		cf, _ := flow.NewConfirmer(key32, nil, clk.now)
		c := analyze(t, p, rc.Conversation, flow.Options{Confirmer: cf})
		for i, want := range rc.Calls {
			r := c.Check(flow.Call{Tool: want.Tool, Args: args(want.Args)})
			got := map[string]string{flow.VerdictAllowed: "allowed", flow.VerdictBlocked: "blocked", flow.VerdictHeld: "held"}[r.Verdict]
			if got != want.Expect {
				t.Errorf("%s: call %d (%s): %s %+v, want %s", f, i, want.Tool, r.Verdict, r.Decisions, want.Expect)
				continue
			}
			if want.Expect == "allowed" {
				continue
			}
			d := r.Decisions[0]
			if d.Kind != want.Kind || d.Rule != want.Rule || !strings.Contains(d.Reason, want.Reason) {
				t.Errorf("%s: call %d: %s/%s %q, want %s/%s with %q", f, i, d.Kind, d.Rule, d.Reason, want.Kind, want.Rule, want.Reason)
			}
			for _, d := range r.Decisions {
				assertNoValues(t, string(want.Args), d.Reason)
			}
		}
	}
	for _, k := range []string{"provenance", "scan", "budgets", "flows", "trustedPaths", "sources", "violation"} {
		if !kinds[k] {
			t.Errorf("no case files for %s", k)
		}
	}
}
