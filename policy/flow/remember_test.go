package flow_test

import (
	"strings"
	"testing"
	"time"

	"github.com/promptgate/promptgate/policy/flow"
)

const rememberSpec = `{"provenance":[{"id":"payee","tool":"send_money","path":"recipient","as":"iban","from":["user"]}],
  "flows":[{"id":"caught","after":["violation"],"tools":["send_*","delete_*"]}]}`

// TestConversationRemembers: once a call is refused by a provenance rule, a flow rule with after
// ["violation"] refuses the writes of the rest of the conversation — later calls of the same
// answer, and of the next request of that conversation (the memory) — and nothing of another
// conversation.
func TestConversationRemembers(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, rememberSpec)
	clk := &clock{time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	mem := flow.NewViolations(0, time.Hour, clk.now)
	turns := []turn{{User: "Pay the bill in bill.txt to DE89 3704 0044 0532 0130 00."}}
	attack := flow.Call{Tool: "send_money", Args: []byte(`{"recipient":"GB82WEST12345698765432"}`)}
	benign := flow.Call{Tool: "send_email", Args: []byte(`{"to":"me@acme.com"}`)}

	c := analyze(t, p, turns, flow.Options{Violations: mem})
	if r := c.Check(benign); r.Verdict != flow.VerdictAllowed {
		t.Fatalf("before the attack: %+v", r)
	}
	if r := c.Check(attack); r.Verdict != flow.VerdictBlocked {
		t.Fatalf("the attack: %+v", r)
	}
	r := c.Check(benign)
	if r.Verdict != flow.VerdictBlocked || r.Decisions[0].Kind != flow.KindFlow ||
		r.Reason != "rule caught: a call of this conversation was refused or held by rule payee" {
		t.Fatalf("after the attack, in the same answer: %+v", r)
	}
	next := append(turns, turn{Assistant: "I could not pay that."}, turn{User: "OK, mail me a summary."})
	if r := analyze(t, p, next, flow.Options{Violations: mem}).Check(benign); r.Verdict != flow.VerdictBlocked ||
		!strings.Contains(r.Reason, "refused or held earlier") {
		t.Fatalf("the next request: %+v", r)
	}
	if r := analyze(t, p, next, flow.Options{}).Check(benign); r.Verdict != flow.VerdictAllowed {
		t.Fatalf("without a memory: %+v", r)
	}
	other := []turn{{User: "Mail me the agenda."}}
	if r := analyze(t, p, other, flow.Options{Violations: mem}).Check(benign); r.Verdict != flow.VerdictAllowed {
		t.Fatalf("another conversation: %+v", r)
	}
	if r := analyze(t, p, next, flow.Options{Violations: mem}).Check(flow.Call{Tool: "read_file", Args: []byte(`{}`)}); r.Verdict != flow.VerdictAllowed {
		t.Fatalf("a tool the rule does not name: %+v", r)
	}
	clk.t = clk.t.Add(2 * time.Hour)
	if r := analyze(t, p, next, flow.Options{Violations: mem}).Check(benign); r.Verdict != flow.VerdictAllowed {
		t.Fatalf("past the memory's time to live: %+v", r)
	}
	// Bound by an explicit conversation id, not by the first message.
	c = analyze(t, p, turns, flow.Options{Violations: mem, Conversation: "conv-1"})
	c.Check(attack)
	if r := analyze(t, p, other, flow.Options{Violations: mem, Conversation: "conv-1"}).Check(benign); r.Verdict != flow.VerdictBlocked {
		t.Fatalf("conversation id: %+v", r)
	}
	// With part of the history out of sight and no id, a refusal in it cannot be ruled out.
	c, err := p.Analyze(unseen(other, "previous_response_id"), flow.Options{Violations: mem})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Check(benign); r.Verdict != flow.VerdictBlocked || !strings.Contains(r.Reason, "cannot be ruled out") {
		t.Fatalf("unseen history: %+v", r)
	}
}

// TestConversationRemembersHeld: a held call counts as caught too; a confirmation still releases a
// call whose every broken rule, the remembering one included, asks for it.
func TestConversationRemembersHeld(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"provenance":[{"id":"payee","tool":"send_money","path":"recipient","as":"iban","from":["user"],"verdict":"confirm"}],
	  "flows":[{"id":"caught","after":["violation"],"tools":["send_*"],"verdict":"confirm"}]}`)
	clk := &clock{time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	cf, _ := flow.NewConfirmer(key32, nil, clk.now)
	mem := flow.NewViolations(0, 0, clk.now)
	turns := []turn{{User: "Pay the landlord."}}
	call := flow.Call{Tool: "send_money", Args: []byte(`{"recipient":"GB82WEST12345698765432"}`)}
	held := analyze(t, p, turns, flow.Options{Confirmer: cf, Violations: mem}).Check(call)
	code := codeOf(t, held.Notice)
	if held.Verdict != flow.VerdictHeld || code == "" || mem.Len() != 1 {
		t.Fatalf("held: %+v (remembered %d)", held, mem.Len())
	}
	r := analyze(t, p, withReply(turns, held.Notice, code), flow.Options{Confirmer: cf, Violations: mem}).Check(call)
	if r.Verdict != flow.VerdictConfirmed || !strings.Contains(kinds(r.Decisions), "flow/confirmed") {
		t.Fatalf("confirmed: %+v", r)
	}
}

func TestViolationsBounded(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, rememberSpec)
	clk := &clock{time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	mem := flow.NewViolations(2, time.Hour, clk.now)
	attack := flow.Call{Tool: "send_money", Args: []byte(`{"recipient":"GB82WEST12345698765432"}`)}
	for i, id := range []string{"a", "b", "c"} {
		analyze(t, p, []turn{{User: "pay"}}, flow.Options{Violations: mem, Conversation: id}).Check(attack)
		clk.t = clk.t.Add(time.Minute * time.Duration(i+1))
	}
	if mem.Len() != 2 {
		t.Fatalf("%d remembered, want 2", mem.Len())
	}
	benign := flow.Call{Tool: "send_email", Args: []byte(`{}`)}
	for id, want := range map[string]string{"a": flow.VerdictAllowed, "b": flow.VerdictBlocked, "c": flow.VerdictBlocked} {
		if r := analyze(t, p, []turn{{User: "mail"}}, flow.Options{Violations: mem, Conversation: id}).Check(benign); r.Verdict != want {
			t.Errorf("%s: %s, want %s (the oldest is forgotten first)", id, r.Verdict, want)
		}
	}
	if _, err := flow.Compile(flow.Spec{Provenance: []flow.ProvenanceRule{{Tool: "t", Path: "p", From: []string{"violation"}}}}); err == nil ||
		!strings.Contains(err.Error(), `"violation" is not a source`) {
		t.Errorf("violation in a from list: %v", err)
	}
}
