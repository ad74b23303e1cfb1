package responses

import (
	"testing"

	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// TestDatamark datamarks the tool outputs of the surface's bodies, and only those.
func TestDatamark(t *testing.T) {
	assemblytest.Marked(t, datamark, []struct{ Name, In, Want string }{
		{"responses",
			`{"input":[{"role":"user","content":"a b"},{"type":"function_call","call_id":"c","arguments":"{\"q\": 1}"},{"type":"function_call_output","call_id":"c","output":"x y"},{"type":"function_call_output","call_id":"d","output":[{"type":"input_text","text":"p\nq"},{"type":"input_image","image_url":"u v"}]},{"type":"custom_tool_call_output","call_id":"e","output":"e f"}]}`,
			`{"input":[{"role":"user","content":"a b"},{"type":"function_call","call_id":"c","arguments":"{\"q\": 1}"},{"type":"function_call_output","call_id":"c","output":"xˆy"},{"type":"function_call_output","call_id":"d","output":[{"type":"input_text","text":"pˆq"},{"type":"input_image","image_url":"u v"}]},{"type":"custom_tool_call_output","call_id":"e","output":"eˆf"}]}`},
		{"responses string input", `{"input":"a b"}`, `{"input":"a b"}`},
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
