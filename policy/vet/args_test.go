package vet

import "testing"

// A decision carries the exact argument bytes it vetted, whatever the verdict, so the decision log
// can keep their digest.
func TestDecisionCarriesArguments(t *testing.T) {
	c := NewChecker(Policy{Allowed: map[string]bool{"ok": true}})
	for _, tc := range []struct{ name, args, verdict string }{
		{"ok", `{ "a" :1}`, VerdictAllowed},
		{"ok", `[1]`, VerdictBlocked},
		{"nope", `{"b":2}`, VerdictBlocked},
	} {
		d := c.Vet(&Call{ID: "c-" + tc.args, Name: tc.name, Args: []byte(tc.args)})
		if d.Verdict != tc.verdict || string(d.Args) != tc.args {
			t.Errorf("%s %s: verdict %q args %q", tc.name, tc.args, d.Verdict, d.Args)
		}
	}
}
