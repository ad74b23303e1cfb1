package flow_test

import (
	"testing"
	"time"

	"github.com/promptgate/promptgate/policy/flow"
)

// TestShadowLeavesNoTrace: a conversation judged for the record only (a shadow version's) holds
// what the active one would hold, confirms what a valid code of the user's confirms without
// spending it, and leaves the memory of caught conversations as it found it.
func TestShadowLeavesNoTrace(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, confirmSpec)
	clk := &clock{time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)}
	cf, err := flow.NewConfirmer(key32, nil, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	call := flow.Call{Tool: "send_money", Args: payArgs}
	shadow := flow.Options{Confirmer: cf, Shadow: true}
	if r := analyze(t, p, confirmBase, shadow).Check(call); r.Verdict != flow.VerdictHeld || r.Notice != "" {
		t.Fatalf("shadow before any code: %+v", r)
	}
	held := analyze(t, p, confirmBase, flow.Options{Confirmer: cf}).Check(call)
	code := codeOf(t, held.Notice)
	replied := withReply(confirmBase, held.Notice, "yes "+code)
	for i := range 3 {
		if r := analyze(t, p, replied, shadow).Check(call); r.Verdict != flow.VerdictConfirmed {
			t.Fatalf("shadow with the code, time %d: %+v", i+1, r)
		}
	}
	if r := analyze(t, p, replied, flow.Options{Confirmer: cf}).Check(call); r.Verdict != flow.VerdictConfirmed {
		t.Fatalf("the active conversation after the shadow's: the code was spent: %+v", r)
	}
	if r := analyze(t, p, withReply(confirmBase, held.Notice, "yes AAAA-AAAA"), shadow).Check(call); r.Verdict != flow.VerdictHeld {
		t.Fatalf("shadow with a wrong code: %+v", r)
	}

	mem := flow.NewViolations(0, time.Hour, clk.now)
	rp := mustCompile(t, rememberSpec)
	turns := []turn{{User: "Pay the bill in bill.txt to DE89 3704 0044 0532 0130 00."}}
	attack := flow.Call{Tool: "send_money", Args: []byte(`{"recipient":"GB82WEST12345698765432"}`)}
	benign := flow.Call{Tool: "send_email", Args: []byte(`{"to":"me@acme.com"}`)}
	c := analyze(t, rp, turns, flow.Options{Violations: mem, Shadow: true})
	if r := c.Check(attack); r.Verdict != flow.VerdictBlocked {
		t.Fatalf("shadow, the attack: %+v", r)
	}
	if r := c.Check(benign); r.Verdict != flow.VerdictBlocked {
		t.Fatalf("shadow, later in the same answer: %+v", r)
	}
	if mem.Len() != 0 {
		t.Fatalf("the shadow wrote %d conversations to the memory", mem.Len())
	}
	if r := analyze(t, rp, turns, flow.Options{Violations: mem}).Check(benign); r.Verdict != flow.VerdictAllowed {
		t.Fatalf("the active conversation after the shadow's: %+v", r)
	}
}
