package messages

import (
	"testing"

	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// TestDatamark datamarks the tool outputs of the surface's bodies, and only those.
func TestDatamark(t *testing.T) {
	assemblytest.Marked(t, datamark, []struct{ Name, In, Want string }{
		{"messages",
			`{"messages":[{"role":"user","content":"a b"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"q":"a b"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"x y"},{"type":"text","text":"and now?"},{"type":"tool_result","tool_use_id":"u","content":[{"type":"text","text":"p q"},{"type":"image","source":{"data":"a b"}}]},{"type":"tool_result","tool_use_id":"v"}]}]}`,
			`{"messages":[{"role":"user","content":"a b"},{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"q":"a b"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"xˆy"},{"type":"text","text":"and now?"},{"type":"tool_result","tool_use_id":"u","content":[{"type":"text","text":"pˆq"},{"type":"image","source":{"data":"a b"}}]},{"type":"tool_result","tool_use_id":"v"}]}]}`},
	})
}

// FuzzDatamark: on any body that passes the proxy's JSON check, datamarking never fails, gives
// valid JSON, keeps every item of the conversation with its role and type, and is idempotent.
func FuzzDatamark(f *testing.F) {
	for _, s := range assemblytest.DatamarkSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if jsoncheck.Object(body, jsoncheck.Limits{}) != nil {
			return
		}
		assemblytest.CheckDatamark(t, datamark, body)
	})
}
