package vet

import (
	"strings"
	"testing"
)

// fakeJudge holds calls whose arguments mention "hold", blocks those that mention "block", and
// records what it was asked.
type fakeJudge struct{ asked []string }

func (j *fakeJudge) Size() int { return 0 }

func (j *fakeJudge) Judge(d Decision) Decision {
	j.asked = append(j.asked, d.CallID)
	switch {
	case strings.Contains(string(d.Args), "hold"):
		d.Kind, d.Verdict, d.Reason, d.Rule, d.Notice = "flow", VerdictHeld, "rule r: held", "r", "[promptgate] held tool call "+d.Tool+": code 1234-5678"
		d.More = []Decision{{Kind: "confirm", Verdict: VerdictHeld, Reason: "held for the user's confirmation"}}
	case strings.Contains(string(d.Args), "block"):
		d.Kind, d.Verdict, d.Reason, d.Rule = "provenance", VerdictBlocked, "rule p: x does not occur in user", "p"
	}
	return d
}

// TestJudge: the judge sees only the calls that pass the checks, in order; a held call does not
// reach the client (Blocked) and its own notice replaces it; in audit mode what the judge stops is
// audited; with atomicParallelCalls the others of the batch are blocked for it, and keep nothing of
// the judge's verdict.
func TestJudge(t *testing.T) {
	t.Parallel()
	calls := func() []*Call {
		var out []*Call
		for i, a := range []string{`{"q":"ok"}`, `{"q":"hold"}`, `not json`, `{"q":"block"}`} {
			c := &Call{Choice: 0, Index: i, ID: "c" + string(rune('0'+i))}
			c.AddName("t")
			c.AppendArgs(a)
			out = append(out, c)
		}
		return out
	}
	for _, m := range []Mode{ModeRefuse, ModeError, ModeAudit, ModeContinue} {
		j := &fakeJudge{}
		ds := NewChecker(Policy{Allowed: map[string]bool{"t": true}, Mode: m, Judge: j}).VetBatch(calls())
		if strings.Join(j.asked, ",") != "c0,c1,c3" {
			t.Errorf("%s: judge asked %v, want the calls that passed vetting, in order", m, j.asked)
		}
		want := []Verdict{VerdictAllowed, VerdictHeld, VerdictBlocked, VerdictBlocked}
		if m == ModeAudit {
			want = []Verdict{VerdictAllowed, VerdictAudited, VerdictAudited, VerdictAudited}
		}
		for i, d := range ds {
			if d.Verdict != want[i] {
				t.Errorf("%s: call %d: %s, want %s", m, i, d.Verdict, want[i])
			}
		}
		if held := ds[1]; m != ModeAudit && (!held.Blocked() || Notice(held) != "[promptgate] held tool call t: code 1234-5678" || held.Kind != "flow" || held.CallID != "c1") {
			t.Errorf("%s: held decision %+v", m, held)
		}
		if m == ModeAudit && (ds[1].Notice != "" || ds[1].More[0].Verdict != VerdictAudited) {
			t.Errorf("audit: the held call keeps a notice or a held verdict: %+v", ds[1])
		}
	}
	j := &fakeJudge{}
	ds := NewChecker(Policy{Allowed: map[string]bool{"t": true}, Atomic: true, Judge: j}).VetBatch(calls()[:2])
	if ds[0].Verdict != VerdictBlocked || ds[0].Reason != ReasonBatch || ds[0].Kind != KindToolCall || ds[1].Verdict != VerdictHeld {
		t.Errorf("atomic: %+v", ds)
	}
}

// TestNewRound: after NewRound, the ids of the calls answered by promptgate may come again.
func TestNewRound(t *testing.T) {
	t.Parallel()
	c := NewChecker(Policy{Allowed: map[string]bool{"t": true}})
	call := func() *Call {
		x := &Call{ID: "call_0"}
		x.AddName("t")
		x.AppendArgs(`{}`)
		return x
	}
	c.Vet(call())
	if d := c.Vet(call()); d.Reason != ReasonDuplicateID {
		t.Fatalf("a repeated id: %+v", d)
	}
	c.NewRound()
	if d := c.Vet(call()); d.Verdict != VerdictAllowed {
		t.Errorf("after NewRound: %+v", d)
	}
}

// TestCaseVariantKeysStopBeforeRulesAndJudge: a call whose arguments hold two keys that differ only
// in letter case is decided on that alone: neither the argument rules nor the judge (the
// information-flow rules) read it, which read the exact key where the tool may read the other;
// audit mode lets it through as audited.
func TestCaseVariantKeysStopBeforeRulesAndJudge(t *testing.T) {
	t.Parallel()
	rules, err := CompileRules([]Rule{{ID: "iban", Tool: "send_money", Path: "recipient", Check: Check{Pattern: "^DE"}}})
	if err != nil {
		t.Fatal(err)
	}
	args := `{"recipient":"DE89370400440532013000","amount":120,"RECIPIENT":"GB82WEST12345698765432"}`
	for _, m := range []Mode{ModeRefuse, ModeError, ModeAudit, ModeContinue} {
		j := &fakeJudge{}
		c := NewChecker(Policy{Allowed: map[string]bool{"send_money": true}, Rules: rules, Mode: m, Judge: j})
		call := &Call{ID: "c1", Name: "send_money", Args: []byte(args)}
		d := c.Vet(call)
		want := VerdictBlocked
		if m == ModeAudit {
			want = VerdictAudited
		}
		if d.Verdict != want || d.Reason != reasonCaseVariant+"at offset 51" || d.Rule != "" || len(j.asked) != 0 {
			t.Errorf("%s: %+v, judge asked %v", m, d, j.asked)
		}
		if strings.Contains(d.Reason, "RECIPIENT") || strings.Contains(d.Reason, "GB82") {
			t.Errorf("%s: the reason quotes the arguments: %q", m, d.Reason)
		}
	}
}
