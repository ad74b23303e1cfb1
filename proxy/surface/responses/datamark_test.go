package responses

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// TestDatamark datamarks the tool outputs of the surface's bodies, and only those.
func TestDatamark(t *testing.T) {
	for _, tt := range []struct {
		name string
		fn   func([]byte) ([]byte, error)
		in   string
		want string
	}{
		{"responses", datamark,
			`{"input":[{"role":"user","content":"a b"},{"type":"function_call","call_id":"c","arguments":"{\"q\": 1}"},{"type":"function_call_output","call_id":"c","output":"x y"},{"type":"function_call_output","call_id":"d","output":[{"type":"input_text","text":"p\nq"},{"type":"input_image","image_url":"u v"}]},{"type":"custom_tool_call_output","call_id":"e","output":"e f"}]}`,
			`{"input":[{"role":"user","content":"a b"},{"type":"function_call","call_id":"c","arguments":"{\"q\": 1}"},{"type":"function_call_output","call_id":"c","output":"xˆy"},{"type":"function_call_output","call_id":"d","output":[{"type":"input_text","text":"pˆq"},{"type":"input_image","image_url":"u v"}]},{"type":"custom_tool_call_output","call_id":"e","output":"eˆf"}]}`},
		{"responses string input", datamark, `{"input":"a b"}`, `{"input":"a b"}`},
	} {
		got, err := tt.fn([]byte(tt.in))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if string(got) != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}

// FuzzDatamark: the result holds no white space, keeps every other character in order, and runs of white
// space became exactly one marker each.

// FuzzDatamark: on any body that passes the proxy's JSON check, datamarking never fails, gives valid
// JSON, keeps every item of the conversation with its role and type, leaves no white space in a marked
// string, and is idempotent.
func FuzzDatamark(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"tool","content":"x y"},{"role":"tool","content":[{"type":"text","text":"p q"}]},{"role":"user","content":[{"type":"tool_result","content":"a b"}]}],"input":[{"type":"function_call_output","output":"o p"}]}`))
	f.Add([]byte(`{"messages":[{"r\u006fle":"tool","c\u006fntent":"a\u2028b"}],"input":"x y"}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":" "},7]}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if jsoncheck.Object(body, jsoncheck.Limits{}) != nil {
			return
		}
		for name, fn := range map[string]func([]byte) ([]byte, error){"responses": datamark} {
			out, err := fn(body)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !gjson.ValidBytes(out) || jsoncheck.Object(out, jsoncheck.Limits{}) != nil {
				t.Fatalf("%s: invalid JSON out: %s", name, out)
			}
			for _, items := range []string{"messages", "input"} {
				a, b := gjson.GetBytes(out, items), gjson.GetBytes(body, items)
				if a.IsArray() != b.IsArray() || len(a.Array()) != len(b.Array()) {
					t.Fatalf("%s: %s changed shape: %s", name, items, out)
				}
				for i, it := range a.Array() {
					if it.Get("role").String() != b.Array()[i].Get("role").String() || it.Get("type").String() != b.Array()[i].Get("type").String() {
						t.Fatalf("%s: %s item %d changed: %s", name, items, i, it.Raw)
					}
				}
			}
			again, err := fn(out)
			if err != nil || string(again) != string(out) {
				t.Fatalf("%s: not idempotent: %s -> %s (%v)", name, out, again, err)
			}
		}
	})
}
