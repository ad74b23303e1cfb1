package vet

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// FuzzRulesConsistent checks that the verdicts of the argument rules are consistent: each rule of a
// set blocks on its own whenever the set names it; a set blocks exactly when one of its rules alone
// blocks (the first in order); a verdict does not depend on white space around the arguments or on
// the order of calls; a call with no rule set is judged by name, JSON and schema alone; the reason
// never quotes the arguments.
func FuzzRulesConsistent(f *testing.F) {
	f.Add(`[{"tool":"*","path":"url","hosts":["*.example.com"]},{"tool":"t","path":"files.#.path","pathPrefix":["/data"]}]`,
		[]byte(`{"url":"https://a.example.com/","files":[{"path":"/data/x"},{"path":"/data/../etc/passwd"}]}`))
	f.Add(`[{"tool":"t","path":"n","max":3,"min":1},{"tool":"t","path":"m","oneOf":["a",1,true]},{"id":"opt","tool":"t","path":"z","pattern":"^q","optional":true}]`, []byte(`{"n":4,"m":"b","z":"x"}`))
	f.Add(`[{"tool":"t","path":"a.#.b.#","pattern":"^x"},{"tool":"t","path":"u","schemes":["https"]}]`, []byte(`{"a":[{"b":["x",["y"]]}],"u":"http://x"}`))
	f.Add(`[{"tool":"other","path":"a","pattern":"^$"}]`, []byte(`{"a":"SECRET-ARG"}`))
	f.Add(`[{"tool":"t","path":"body","notPattern":"\\d{13,16}"},{"tool":"t","path":"u","not":{"hosts":["*.evil.net"]}}]`,
		[]byte(`{"body":"card 4111111111111111","u":"www.a.evil.net/login"}`))
	f.Add(`[{"tool":"t","path":"p","not":{"pathPrefix":["/etc"]}},{"tool":"t","path":"n","not":{"oneOf":[1,"x"]}}]`,
		[]byte(`{"p":"../etc","n":1}`))
	f.Fuzz(func(t *testing.T, rulesJSON string, args []byte) {
		var rs []Rule
		if json.Unmarshal([]byte(rulesJSON), &rs) != nil || len(rs) > 8 {
			return
		}
		for i := range rs {
			if rs[i].ID == "" {
				rs[i].ID = "r" + strconv.Itoa(i) // a rule's default name is its index in the set
			}
		}
		set, err := CompileRules(rs)
		if err != nil {
			return
		}
		schema := map[string][]byte{"t": []byte(`{"type":"object"}`)}
		checker := func(rules *RuleSet) *Checker {
			return NewChecker(Policy{Allowed: map[string]bool{"t": true}, Rules: rules, Schemas: schema})
		}
		all := checker(set)
		reason, rule, ok := all.Check("t", args)
		if r2, ru2, ok2 := all.Check("t", args); r2 != reason || ru2 != rule || ok2 != ok {
			t.Fatalf("two checks of the same call disagree: %q/%q/%v then %q/%q/%v", reason, rule, ok, r2, ru2, ok2)
		}
		// (A syntax error's offset moves with the white space: only the verdict and the rule must
		// stay.)
		if r3, ru3, ok3 := all.Check("t", append(append([]byte(" \n\t"), args...), ' ')); ru3 != rule || ok3 != ok {
			t.Fatalf("white space around the arguments changed the verdict: %q/%q/%v vs %q/%q/%v", reason, rule, ok, r3, ru3, ok3)
		}
		baseReason, _, baseOK := checker(nil).Check("t", args)
		if !baseOK {
			if ok || reason != baseReason || rule != "" {
				t.Fatalf("arguments refused without rules (%q) but with rules: %q/%q/%v", baseReason, reason, rule, ok)
			}
			return
		}
		// The set's verdict is the first single rule that blocks.
		first := ""
		firstRule := ""
		for i := range rs {
			one, err := CompileRules(rs[i : i+1])
			if err != nil {
				t.Fatalf("rule %d compiles in a set but not alone: %v", i, err)
			}
			if r, ru, ok1 := checker(one).Check("t", args); !ok1 && first == "" {
				first, firstRule = r, ru
			}
		}
		if ok != (first == "") || reason != first || rule != firstRule {
			t.Fatalf("set verdict %q/%q/%v, first blocking rule alone %q/%q", reason, rule, ok, first, firstRule)
		}
		if !ok && len(args) >= 8 && bytes.Contains([]byte(reason), bytes.TrimSpace(args)) {
			t.Fatalf("the reason quotes the arguments: %q", reason)
		}
	})
}
