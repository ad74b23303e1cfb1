package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// Confirmation codes through the real proxy, on every surface, stream and non-stream: the replies
// users type, a code per hold, the binding across the shapes a conversation's turns take, and
// notices that show every value that broke a rule.

// codeCase runs f for every surface, stream and non-stream, each with a scripted upstream that
// makes the given calls and a confirming proxy of its own.
func codeCase(t *testing.T, calls []flowtest.Call, f func(t *testing.T, name string, sf flowtest.Surface, stream bool, ask asker)) {
	t.Helper()
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			up := newFlowUpstream(t, scriptedTurn{calls: calls})
			ts, rec, _ := confirmServer(t, up.URL)
			ask := func(body []byte) (shown, []string) {
				t.Helper()
				_, rh, b := post(t, ts, sf, body, nil)
				return read(t, sf, stream, b), confirmVerdicts(rec.eventsOfRequest(rh.Get(HeaderRequestID)))
			}
			f(t, fmt.Sprintf("%s/stream=%v", sf, stream), sf, stream, ask)
		}
	}
}

// asker sends a client request and returns what the client was shown and the request's confirm
// verdicts.
type asker func(body []byte) (shown, []string)

var deleteTools = []string{"web_fetch", "delete_file"}

// TestConfirmationRepliesAsTyped: the replies users type release the held call — a word of four
// letters before the code ("Code", "okay", "Sure", "Please send"), an en or em dash, a no-break
// space, full-width forms — and a reply one character off does not.
func TestConfirmationRepliesAsTyped(t *testing.T) {
	t.Parallel()
	replies := []struct {
		name string
		f    func(code string) string
		ok   bool
	}{
		{"Code", func(k string) string { return "Code " + k }, true},
		{"okay", func(k string) string { return "okay " + k }, true},
		{"Sure", func(k string) string { return "Sure " + k }, true},
		{"Please send", func(k string) string { return "Please send " + k }, true},
		{"en dash", func(k string) string { return "Code " + strings.Replace(k, "-", "\u2013", 1) }, true},
		{"em dash, lower case", func(k string) string { return strings.ToLower(strings.Replace(k, "-", "\u2014", 1)) }, true},
		{"no-break space", func(k string) string { return "okay\u00a0" + strings.Replace(k, "-", "\u00a0", 1) }, true},
		{"full width", func(k string) string {
			return strings.Map(func(r rune) rune {
				if r > ' ' && r < 0x7f {
					return r + 0xfee0
				}
				return r
			}, "Code "+k)
		}, true},
		{"one character off", func(k string) string { return "Code " + k[:8] + map[bool]string{true: "2", false: "0"}[k[8] == '0'] }, false},
	}
	codeCase(t, []flowtest.Call{{ID: "d1", Tool: "delete_file", Args: deleteArgs}}, func(t *testing.T, name string, sf flowtest.Surface, stream bool, ask asker) {
		for i, rp := range replies {
			turns := slices.Clone(readThenDelete)
			turns[0].User = fmt.Sprintf("%s (%d)", turns[0].User, i) // a conversation of its own
			held, _ := ask(flowRequest(t, sf, turns, deleteTools, stream, nil))
			code := noticeCode(held.text)
			if code == "" {
				t.Fatalf("%s: no code: %+v", name, held)
			}
			reply := rp.f(code)
			got, v := ask(flowRequest(t, sf, append(turns, flowtest.Turn{Assistant: held.text}, flowtest.Turn{User: reply}), deleteTools, stream, nil))
			if released := len(got.calls) == 1 && slices.Contains(v, audit.VerdictConfirmed); released != rp.ok {
				t.Errorf("%s: %s: reply %q for %s: calls %d, verdicts %v", name, rp.name, reply, code, len(got.calls), v)
			}
		}
	})
}

// TestConfirmationCodePerHold: the same call, released by its code and held again in the same
// minute, shows a new code (not the one just used), which releases it in turn; the used one does
// not again.
func TestConfirmationCodePerHold(t *testing.T) {
	t.Parallel()
	codeCase(t, []flowtest.Call{{ID: "d1", Tool: "delete_file", Args: deleteArgs}}, func(t *testing.T, name string, sf flowtest.Surface, stream bool, ask asker) {
		turns := slices.Clone(readThenDelete)
		var used []string
		for round := range 3 {
			held, v := ask(flowRequest(t, sf, turns, deleteTools, stream, nil))
			code := noticeCode(held.text)
			if code == "" || slices.Contains(used, code) || len(held.calls) != 0 || !slices.Contains(v, audit.VerdictHeld) {
				t.Fatalf("%s: hold %d: code %q after %v: %+v %v", name, round+1, code, used, held, v)
			}
			turns = append(turns, flowtest.Turn{Assistant: held.text}, flowtest.Turn{User: "Yes, " + code})
			got, v := ask(flowRequest(t, sf, turns, deleteTools, stream, nil))
			if len(got.calls) != 1 || !slices.Contains(v, audit.VerdictConfirmed) {
				t.Fatalf("%s: the code of hold %d did not release the call: %+v %v", name, round+1, got, v)
			}
			used = append(used, code)
			// The client runs the call; the user asks for it once more.
			turns = append(turns, flowtest.Turn{Calls: []flowtest.Call{{ID: fmt.Sprintf("d%d", round+1), Tool: "delete_file", Args: deleteArgs}}},
				flowtest.Turn{Tool: fmt.Sprintf("d%d", round+1), Output: "deleted"}, flowtest.Turn{User: "It came back. Delete it again."})
		}
		// An old reply alone does not release it again.
		old := append(slices.Clone(turns), flowtest.Turn{Assistant: "Held again."}, flowtest.Turn{User: used[0]})
		if got, v := ask(flowRequest(t, sf, old, deleteTools, stream, nil)); len(got.calls) != 0 || !slices.Contains(v, audit.VerdictReused) {
			t.Errorf("%s: a used code: %+v %v", name, got, v)
		}
	})
}

// TestConfirmationBindsAcrossTurnShapes: without a conversation id, a code given in one turn
// releases the call in the next however the app's messages stand there: a Responses conversation
// with instructions and a developer item continued with previous_response_id (the instance's record
// replays the developer item before the instructions sent again), the same conversation sent whole,
// Chat with system and developer messages, Messages with a system prompt.
func TestConfirmationBindsAcrossTurnShapes(t *testing.T) {
	t.Parallel()
	first := append([]flowtest.Turn{{App: "You keep the user's drive tidy."}, {App: "The user's drive is the team drive."}}, readThenDelete...)
	codeCase(t, []flowtest.Call{{ID: "d1", Tool: "delete_file", Args: deleteArgs}}, func(t *testing.T, name string, sf flowtest.Surface, stream bool, ask asker) {
		held, _ := ask(flowRequest(t, sf, first, deleteTools, stream, nil))
		code := noticeCode(held.text)
		if code == "" {
			t.Fatalf("%s: no code: %+v", name, held)
		}
		if sf == flowtest.Responses {
			next := flowRequest(t, sf, []flowtest.Turn{{App: first[0].App}, {User: "Code " + code}}, deleteTools, stream,
				map[string]any{"previous_response_id": "resp_1"})
			if got, v := ask(next); len(got.calls) != 1 || !slices.Contains(v, audit.VerdictConfirmed) {
				t.Errorf("%s: continued with previous_response_id: %+v %v", name, got, v)
			}
			held, _ = ask(flowRequest(t, sf, first, deleteTools, stream, nil))
			if code = noticeCode(held.text); code == "" {
				t.Fatalf("%s: no second code: %+v", name, held)
			}
		}
		whole := append(slices.Clone(first), flowtest.Turn{Assistant: held.text}, flowtest.Turn{User: "Code " + code})
		if got, v := ask(flowRequest(t, sf, whole, deleteTools, stream, nil)); len(got.calls) != 1 || !slices.Contains(v, audit.VerdictConfirmed) {
			t.Errorf("%s: the whole conversation sent again: %+v %v", name, got, v)
		}
	})
}

// mailConfirmProtocol holds a mail for confirmation when a recipient is in no user message.
var mailConfirmProtocol = json.RawMessage(`{"id":"mail","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["*"]},
  "toolCalls":{"onViolation":"refuse","provenance":[{"id":"mail-to","tool":"send_email","path":"to.#","as":"email","from":["user"],
    "verdict":"confirm","keyArgs":["to.#"]}]}}`)

// TestHeldNoticeShowsBrokenValues: a held call's notice shows every value that broke the rule, the
// fourth recipient of a list whose key argument shows three included; a call with more such values
// than a notice shows is blocked instead, with a reason that quotes none of them.
func TestHeldNoticeShowsBrokenValues(t *testing.T) {
	t.Parallel()
	recipients := func(n int) json.RawMessage {
		to := []string{"a@acme.com", "b@acme.com", "c@acme.com"}
		for i := range n {
			to = append(to, fmt.Sprintf("eve%d@evil.example", i))
		}
		b, _ := json.Marshal(map[string]any{"to": to, "subject": "Notes"})
		return b
	}
	up := newFlowUpstream(t, scriptedTurn{calls: []flowtest.Call{{ID: "m1", Tool: "send_email", Args: recipients(1)}}})
	up.script("many", scriptedTurn{calls: []flowtest.Call{{ID: "m2", Tool: "send_email", Args: recipients(17)}}})
	ts, rec := flowServer(t, up.URL, mailConfirmProtocol, func(o *Options) {
		cf, err := NewConfirmer("")
		if err != nil {
			t.Fatal(err)
		}
		o.Confirmer = cf
	})
	turns := []flowtest.Turn{{User: "Mail the notes to a@acme.com, b@acme.com and c@acme.com."}}
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			name := fmt.Sprintf("%s/stream=%v", sf, stream)
			_, _, b := post(t, ts, sf, flowRequest(t, sf, turns, []string{"send_email"}, stream, nil), nil)
			got := read(t, sf, stream, b)
			want := `Arguments: to.#=["a@acme.com", "b@acme.com", "c@acme.com", …]. Values that broke the rule: to.# (value 4)="eve0@evil.example". To run it once`
			if len(got.calls) != 0 || noticeCode(got.text) == "" || !strings.Contains(got.text, want) {
				t.Errorf("%s: %+v, want a notice with %s", name, got, want)
			}
			_, h, b := post(t, ts, sf, flowRequest(t, sf, turns, []string{"send_email"}, stream, nil), http.Header{headerScript: {"many"}})
			got = read(t, sf, stream, b)
			if len(got.calls) != 0 || noticeCode(got.text) != "" || strings.Contains(string(b), "evil.example") ||
				!strings.Contains(got.text, "[promptgate] blocked tool call send_email: rule mail-to: more values broke the rules than a notice shows (16)") {
				t.Errorf("%s: 20 recipients, 17 not the user's: %s", name, b)
			}
			if v := confirmVerdicts(rec.eventsOfRequest(h.Get(HeaderRequestID))); !slices.Equal(v, []string{audit.VerdictBlocked}) {
				t.Errorf("%s: decisions %v", name, v)
			}
		}
	}
}
