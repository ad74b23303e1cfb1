package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// rememberProtocol refuses payments to an IBAN the user did not give, and, once that happened in a
// conversation, every send_* call of the rest of it.
var rememberProtocol = json.RawMessage(`{"id":"pay","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["*"]},
  "toolCalls":{"provenance":[{"id":"payee","tool":"send_money","path":"recipient","as":"iban","from":["user"]}],
    "flows":[{"id":"caught","after":["violation"],"tools":["send_*"]}]}}`)

// TestConversationRemembersThroughProxy: the attacker's payment is refused in the first request; in
// the client's next request of that conversation (which does not carry promptgate's own decisions),
// a send_* call is refused too; another conversation is not affected. On every surface, stream and
// non-stream.
func TestConversationRemembersThroughProxy(t *testing.T) {
	t.Parallel()
	mail := flowtest.Call{ID: "m1", Tool: "send_email", Args: json.RawMessage(`{"to":"me@acme.com","body":"done"}`)}
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			name := fmt.Sprintf("%s/stream=%v", sf, stream)
			up := newFlowUpstream(t, scriptedTurn{calls: []flowtest.Call{payCall("p1", attackerIBAN)}})
			up.script("mail", scriptedTurn{calls: []flowtest.Call{mail}})
			ts, rec := flowServer(t, up.URL, rememberProtocol)
			tools := []string{"send_money", "send_email"}
			first := []flowtest.Turn{{User: "Pay the bill in bill.txt to " + userIBAN + "."}}
			_, h, b := post(t, ts, sf, flowRequest(t, sf, first, tools, stream, nil), nil)
			if got := read(t, sf, stream, b); len(got.calls) != 0 {
				t.Fatalf("%s: the attacker's payment was released: %s", name, b)
			}
			if reason := blockedReason(rec.eventsOfRequest(h.Get(HeaderRequestID)), "send_money"); !strings.Contains(reason, "rule payee") {
				t.Fatalf("%s: first: %q", name, reason)
			}
			next := append(slices.Clone(first), flowtest.Turn{Assistant: "I could not pay."}, flowtest.Turn{User: "Then mail me a note."})
			_, h, b = post(t, ts, sf, flowRequest(t, sf, next, tools, stream, nil), http.Header{headerScript: {"mail"}})
			if got := read(t, sf, stream, b); len(got.calls) != 0 {
				t.Errorf("%s: a send_* call after the refusal was released: %s", name, b)
			}
			if reason := blockedReason(rec.eventsOfRequest(h.Get(HeaderRequestID)), "send_email"); !strings.Contains(reason, "rule caught: a call of this conversation was refused or held earlier") {
				t.Errorf("%s: next: %q", name, reason)
			}
			other := []flowtest.Turn{{User: "Mail me a note."}}
			_, _, b = post(t, ts, sf, flowRequest(t, sf, other, tools, stream, nil), http.Header{headerScript: {"mail"}})
			if got := read(t, sf, stream, b); len(got.calls) != 1 {
				t.Errorf("%s: another conversation was refused: %s", name, b)
			}
		}
	}
}
