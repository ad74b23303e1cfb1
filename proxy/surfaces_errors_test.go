package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/flow/flowtest"
	"github.com/promptgate/promptgate/proxy/relay"
)

// The errors an answer ends with, through the real proxy on every surface, stream and non-stream,
// read as the client reads them (see shown.readError): the contract's code in each surface's own
// shape.

// TestErrorModeOnEverySurface: in onViolation "error", the attacker's payment ends the answer with
// tool_call_blocked — a 403 body, or a stream's last event, the stream's status 200 — in the
// surface's shape (Gemini's: code 403, the contract's code as the reason of its ErrorInfo); nothing
// of the call reaches the client and no call is shown.
func TestErrorModeOnEverySurface(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	protocol, err := sjson.SetBytes(cc.protocol, "toolCalls.onViolation", "error")
	if err != nil {
		t.Fatal(err)
	}
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			name := fmt.Sprintf("%s/stream=%v", sf, stream)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				up := newFlowUpstream(t, scriptedTurn{text: "Paying the bill. ", calls: []flowtest.Call{cc.evil}, in: 1, out: 1})
				ts, _ := flowServer(t, up.URL, protocol)
				status, h, b := post(t, ts, sf, flowRequest(t, sf, cc.turns, cc.tools, stream, nil), nil)
				want := http.StatusForbidden
				if stream {
					want = http.StatusOK
				}
				got := read(t, sf, stream, b)
				if status != want || got.err != relay.CodeToolCallBlocked || len(got.calls) != 0 {
					t.Errorf("status %d, error %q, calls %+v: %s", status, got.err, got.calls, b)
				}
				if sf == flowtest.Gemini && got.status != http.StatusForbidden {
					t.Errorf("Gemini's error code %d, want 403: %s", got.status, b)
				}
				checkNoLeak(t, name, h, b, cc.evil.ID, "GB82")
			})
		}
	}
}

// TestTruncatedOnEverySurface: a stream whose upstream ends after the first half of its text
// (before the finish, the completed response, message_stop) ends with upstream_stream_truncated in
// the surface's shape (Gemini's: code 502) after the text that went out; a stream that ends cleanly
// carries no error (control).
func TestTruncatedOnEverySurface(t *testing.T) {
	t.Parallel()
	turn := scriptedTurn{text: "Checking the balance now.", in: 1, out: 1}
	for _, sf := range flowtest.Surfaces {
		for _, cut := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/cut=%v", sf, cut), func(t *testing.T) {
				t.Parallel()
				head := halves(turn.text)[0]
				up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
					evs := turn.events(sf, 1)
					if cut {
						evs = evs[:slices.IndexFunc(evs, func(ev string) bool { return strings.Contains(ev, js(head)) })+1]
					}
					w.Header().Set("Content-Type", "text/event-stream")
					for _, ev := range evs {
						writeSplit(w, ev, len(ev)/2+1)
					}
				})
				ts, _ := flowServer(t, up.URL, redProtocol)
				status, _, b := post(t, ts, sf, flowRequest(t, sf, []flowtest.Turn{{User: "What is my balance?"}}, redTools, true, nil), nil)
				got := read(t, sf, true, b)
				if status != http.StatusOK || !bytes.Contains(b, []byte(js(head))) {
					t.Fatalf("status %d, the text that went out is not shown: %s", status, b)
				}
				if !cut {
					if got.err != "" || got.text != turn.text || bytes.Contains(b, []byte(relay.CodeTruncated)) {
						t.Errorf("a clean end: error %q, text %q: %s", got.err, got.text, b)
					}
					return
				}
				if got.err != relay.CodeTruncated || sf == flowtest.Gemini && got.status != http.StatusBadGateway {
					t.Errorf("error %q (status %d), want %s: %s", got.err, got.status, relay.CodeTruncated, b)
				}
			})
		}
	}
}
