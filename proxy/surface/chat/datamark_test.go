package chat

import (
	"testing"

	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// TestDatamark datamarks the tool outputs of the surface's bodies, and only those.
func TestDatamark(t *testing.T) {
	assemblytest.Marked(t, datamark, []struct{ Name, In, Want string }{
		{"chat string and parts",
			`{"messages":[{"role":"user","content":"a b"},{"role":"tool","tool_call_id":"c","content":"x y"},{"role":"tool","content":[{"type":"text","text":"p q"},{"type":"image_url","image_url":{"url":"u v"}}]},{"role":"function","name":"f","content":"f g"}],"z":1}`,
			`{"messages":[{"role":"user","content":"a b"},{"role":"tool","tool_call_id":"c","content":"xˆy"},{"role":"tool","content":[{"type":"text","text":"pˆq"},{"type":"image_url","image_url":{"url":"u v"}}]},{"role":"function","name":"f","content":"fˆg"}],"z":1}`},
		{"chat odd shapes left alone",
			`{"messages":[{"role":"tool","content":null},{"role":"tool","content":7},{"role":"tool","content":["a b",{"text":3}]},{"role":"tool"},"x y",null]}`,
			`{"messages":[{"role":"tool","content":null},{"role":"tool","content":7},{"role":"tool","content":["a b",{"text":3}]},{"role":"tool"},"x y",null]}`},
		{"chat no messages", `{"messages":"a b"}`, `{"messages":"a b"}`},
		{"chat escaped keys", `{"messages":[{"r\u006fle":"tool","c\u006fntent":"a b"}]}`, `{"messages":[{"r\u006fle":"tool","c\u006fntent":"aˆb"}]}`},
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
