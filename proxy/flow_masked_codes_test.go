package proxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// TestHeldCodeNeverReachesTheModel: the code of a held call is the user's decision. The notice that
// holds it comes back in the client's next request as the model's earlier turn; promptgate masks
// the code there before the body goes upstream, while confirmation still reads the client's body:
// the user's reply with the code releases the call. On every surface, stream and non-stream.
func TestHeldCodeNeverReachesTheModel(t *testing.T) {
	t.Parallel()
	tools := []string{"web_fetch", "delete_file"}
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			name := fmt.Sprintf("%s/stream=%v", sf, stream)
			up := newFlowUpstream(t, scriptedTurn{calls: []flowtest.Call{{ID: "d1", Tool: "delete_file", Args: deleteArgs}}})
			ts, _, _ := confirmServer(t, up.URL)
			_, _, b := post(t, ts, sf, flowRequest(t, sf, readThenDelete, tools, stream, nil), nil)
			held := read(t, sf, stream, b)
			code := noticeCode(held.text)
			if code == "" {
				t.Fatalf("%s: no code in %q", name, held.text)
			}
			withNotice := append(slices.Clone(readThenDelete), flowtest.Turn{Assistant: "I will ask first.\n" + held.text})
			_, _, _ = post(t, ts, sf, flowRequest(t, sf, append(slices.Clone(withNotice), flowtest.Turn{User: "what was that?"}), tools, stream, nil), nil)
			sent := up.requests()
			last := string(sent[len(sent)-1])
			if strings.Contains(last, code) || !strings.Contains(last, flow.HiddenCode) || !strings.Contains(last, "I will ask first.") {
				t.Errorf("%s: the upstream was sent the code, or the notice without its mask: %s", name, last)
			}
			_, _, b = post(t, ts, sf, flowRequest(t, sf, append(slices.Clone(withNotice), flowtest.Turn{User: "yes " + code}), tools, stream, nil), nil)
			if got := read(t, sf, stream, b); len(got.calls) != 1 || got.calls[0].ID != "d1" {
				t.Errorf("%s: the user's code did not release the call: %+v", name, got)
			}
			sent = up.requests()
			if last := string(sent[len(sent)-1]); strings.Count(last, code) != 1 {
				t.Errorf("%s: the code reached the upstream %d times, want once (the user's own message): %s", name, strings.Count(last, code), last)
			}
		}
	}
}
