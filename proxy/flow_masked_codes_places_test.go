package proxy

import (
	"slices"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// TestHeldCodeNeverReachesTheModelFromAnyPlace: apps move the model's earlier text around — into
// a summary in the system message, into the user's quoted reply, re-wrapped across lines, split
// over two messages — and the code of a held call must reach the model from none of them.
func TestHeldCodeNeverReachesTheModelFromAnyPlace(t *testing.T) {
	t.Parallel()
	tools := []string{"web_fetch", "delete_file"}
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			up := newFlowUpstream(t, scriptedTurn{calls: []flowtest.Call{{ID: "d1", Tool: "delete_file", Args: deleteArgs}}})
			ts, _, _ := confirmServer(t, up.URL)
			_, _, b := post(t, ts, sf, flowRequest(t, sf, readThenDelete, tools, stream, nil), nil)
			held := read(t, sf, stream, b)
			code := noticeCode(held.text)
			if code == "" {
				t.Fatalf("%s stream=%v: no code in %q", sf, stream, held.text)
			}
			cut := strings.Index(held.text, code)
			places := map[string][]flowtest.Turn{
				"system summary": append([]flowtest.Turn{{App: "Summary of the conversation so far: " + held.text}}, readThenDelete[1:]...),
				"user quote":     append(slices.Clone(readThenDelete), flowtest.Turn{User: "> " + held.text + "\n\nwhat is this?"}),
				"re-wrapped":     append(slices.Clone(readThenDelete), flowtest.Turn{Assistant: held.text[:cut] + "\n" + held.text[cut:]}),
				"split": append(slices.Clone(readThenDelete), flowtest.Turn{Assistant: held.text[:cut]},
					flowtest.Turn{User: "and?"}, flowtest.Turn{Assistant: held.text[cut:]}, flowtest.Turn{User: "what is this?"}),
			}
			for name, turns := range places {
				_, _, _ = post(t, ts, sf, flowRequest(t, sf, turns, tools, stream, nil), nil)
				sent := up.requests()
				if last := string(sent[len(sent)-1]); strings.Contains(last, code) {
					t.Errorf("%s stream=%v, %s: the upstream was sent the code: %s", sf, stream, name, last)
				}
			}
		}
	}
}
