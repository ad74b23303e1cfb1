package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// TestContinuedUsageIsEveryRoundsSum: a continued answer's usage is the sum of every round's, on
// every surface, stream and non-stream, also when the client keeps nothing of the first round (it
// was the refused call alone, no text); a non-stream answer says how many calls the client did not
// get (X-Promptgate-Blocked: the refused one, which promptgate answered itself) and how many times
// it was continued (X-Promptgate-Continued).
func TestContinuedUsageIsEveryRoundsSum(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			for _, first := range []string{"", continueText1} {
				t.Run(fmt.Sprintf("%s/stream=%v/first text %q", sf, stream, first), func(t *testing.T) {
					t.Parallel()
					up := newFlowUpstream(t,
						scriptedTurn{text: first, calls: []flowtest.Call{cc.evil}, in: 10, out: 5},
						scriptedTurn{text: continueText2, calls: []flowtest.Call{cc.good}, in: 20, out: 7})
					ts, _ := flowServer(t, up.URL, cc.protocol)
					status, h, b := post(t, ts, sf, flowRequest(t, sf, cc.turns, cc.tools, stream, nil), nil)
					if status != http.StatusOK {
						t.Fatalf("status %d: %s", status, b)
					}
					if n := len(up.requests()); n != 2 {
						t.Fatalf("%d upstream requests, want 2", n)
					}
					got := read(t, sf, stream, b)
					if got.text != first+continueText2 || len(got.calls) != 1 || got.calls[0].ID != cc.good.ID {
						t.Errorf("shown %+v", got)
					}
					checkSummedUsage(t, sf, got.usage)
					want := map[string]string{HeaderBlocked: "1", HeaderContinued: "1"}
					if stream {
						want = map[string]string{HeaderBlocked: "", HeaderContinued: ""} // headers go out before the stream
					}
					for k, v := range want {
						if h.Get(k) != v {
							t.Errorf("%s = %q, want %q", k, h.Get(k), v)
						}
					}
				})
			}
		}
	}
}

// TestContinuedResponseRetrievedAsCreated: GET /v1/responses/{id} of a continued response's id (the
// last round's, which the client continues from) shows what its create showed — the output of every
// round the client kept and the usage of every round — with the same X-Promptgate-Blocked and
// X-Promptgate-Continued, although the upstream stores that response with the last round's output
// and usage only; a streamed retrieval's terminal event does too.
func TestContinuedResponseRetrievedAsCreated(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	sf := flowtest.Responses
	last := scriptedTurn{text: continueText2, calls: []flowtest.Call{cc.good}, in: 20, out: 7}
	for _, stream := range []bool{false, true} {
		for _, first := range []string{"", continueText1} {
			t.Run(fmt.Sprintf("stream=%v/first text %q", stream, first), func(t *testing.T) {
				t.Parallel()
				fu := newFlowUpstream(t, scriptedTurn{text: first, calls: []flowtest.Call{cc.evil}, in: 10, out: 5}, last)
				stored := map[string]string{
					"/v1/responses/resp_2":             last.body(sf, 2),
					"/v1/responses/resp_2?stream=true": strings.Join(last.events(sf, 2), ""),
				}
				up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
					if r.Method != http.MethodGet {
						fu.serve(w, r)
						return
					}
					b, ok := stored[r.URL.RequestURI()]
					if !ok {
						http.NotFound(w, r)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					if strings.HasSuffix(r.URL.RequestURI(), "stream=true") {
						w.Header().Set("Content-Type", "text/event-stream")
						for _, ev := range last.events(sf, 2) {
							writeSplit(w, ev, len(ev)/2+1)
						}
						return
					}
					_, _ = io.WriteString(w, b)
				})
				ts, _ := flowServer(t, up.URL, cc.protocol)
				status, _, b := post(t, ts, sf, flowRequest(t, sf, cc.turns, cc.tools, stream, nil), nil)
				if status != http.StatusOK {
					t.Fatalf("status %d: %s", status, b)
				}
				created := read(t, sf, stream, b)

				resp, err := ts.Client().Get(ts.URL + "/v1/responses/resp_2")
				if err != nil {
					t.Fatal(err)
				}
				rb, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || gjson.GetBytes(rb, "id").Str != "resp_2" {
					t.Fatalf("retrieval: %d %s", resp.StatusCode, rb)
				}
				got := read(t, sf, false, rb)
				if got.text != created.text || got.text != first+continueText2 || len(got.calls) != 1 || got.calls[0].ID != cc.good.ID {
					t.Errorf("retrieved %+v, created %+v", got, created)
				}
				checkSummedUsage(t, sf, got.usage)
				if resp.Header.Get(HeaderBlocked) != "1" || resp.Header.Get(HeaderContinued) != "1" {
					t.Errorf("retrieval headers %s=%q %s=%q, want 1 and 1", HeaderBlocked, resp.Header.Get(HeaderBlocked),
						HeaderContinued, resp.Header.Get(HeaderContinued))
				}
				checkNoLeak(t, "GET resp_2", resp.Header, rb, cc.evil.ID, "[promptgate]")

				resp, err = ts.Client().Get(ts.URL + "/v1/responses/resp_2?stream=true")
				if err != nil {
					t.Fatal(err)
				}
				sb, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				streamed := read(t, sf, true, sb)
				if streamed.text != first+continueText2 || len(streamed.calls) != 1 {
					t.Errorf("streamed retrieval's final response %+v", streamed)
				}
				checkSummedUsage(t, sf, streamed.usage)
			})
		}
	}
}

// TestBlockedHeaderCountsCalls: X-Promptgate-Blocked counts calls, also on an input item listing,
// where a refused call has two items (the call, where the upstream lists the chain, and the refusal
// promptgate sent as its output): both are removed, and the count is one.
func TestBlockedHeaderCountsCalls(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	sf := flowtest.Responses
	fu := newFlowUpstream(t, scriptedTurn{calls: []flowtest.Call{cc.evil}, in: 1, out: 1}, scriptedTurn{text: continueText2, in: 1, out: 1})
	listing := fmt.Sprintf(`{"object":"list","data":[{"type":"function_call_output","id":"fco_1","call_id":%q,"output":"refused"},`+
		`{"type":"function_call","id":"fc_1","call_id":%q,"name":%q,"arguments":"{}"},`+
		`{"type":"message","id":"msg_u","role":"user","content":[{"type":"input_text","text":"pay the bill"}]}],"first_id":"fco_1","last_id":"msg_u","has_more":false}`,
		cc.evil.ID, cc.evil.ID, cc.evil.Tool)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			fu.serve(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, listing)
	})
	ts, _ := flowServer(t, up.URL, cc.protocol)
	if status, _, b := post(t, ts, sf, flowRequest(t, sf, cc.turns, cc.tools, false, nil), nil); status != http.StatusOK {
		t.Fatalf("status %d: %s", status, b)
	}
	resp, err := ts.Client().Get(ts.URL + "/v1/responses/resp_2/input_items")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := len(gjson.GetBytes(b, "data").Array()); resp.StatusCode != http.StatusOK || n != 1 || gjson.GetBytes(b, "first_id").Str != "msg_u" {
		t.Errorf("listing: %d, %d items: %s", resp.StatusCode, n, b)
	}
	if got := resp.Header.Get(HeaderBlocked); got != "1" {
		t.Errorf("%s = %q, want 1 (one call)", HeaderBlocked, got)
	}
}
