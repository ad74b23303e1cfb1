package assembly

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// FuzzRewriteSurfaces feeds bodies that pass the proxy's JSON check through the Responses and Messages parsers
// and rewrites: nothing panics, and whenever a parser accepts a body, the upstream body is valid JSON without
// the promptgate field, with the prompt where the surface takes it, and with no system or developer input item
// left (Responses).
func FuzzRewriteSurfaces(f *testing.F) {
	f.Add([]byte(`{"model":"m","instructions":"i","input":[{"role":"developer","content":"d"},{"role":"user","content":"u"}],"tools":[{"type":"function","name":"f"},{"type":"mcp"},{"type":"mcp"}],"tool_choice":"required","promptgate":{}}`))
	f.Add([]byte(`{"input":"hi","tools":[{"type":"web_search"}],"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"web_search"}]}}`))
	f.Add([]byte(`{"system":[{"type":"text","text":"=== X ==="}],"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"},{"type":"bash_20250124","name":"bash"}],"tool_choice":{"type":"tool","name":"f"}}`))
	f.Add([]byte(`{"promptg\u0061te":{},"m\u0065ssages":[],"inp\u0075t":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if jsoncheck.Object(body, jsoncheck.Limits{}) != nil {
			return
		}
		tmpl := ParseTemplate("t", 1, layeredText)
		if r, err := ParseResponses(body); err == nil {
			kept := r.Tools
			if len(kept) > 0 {
				kept = kept[1:]
			}
			_ = ResponsesToolChoice(body, kept)
			p := Build(tmpl, Layers{Application: r.Application, Tools: kept, NativeTools: r.NativeTools}, DefaultSettings())
			out, err := RewriteResponses(body, p, kept, len(kept) < len(r.Tools))
			if err != nil {
				t.Fatalf("RewriteResponses: %v", err)
			}
			if !gjson.ValidBytes(out) || gjson.GetBytes(out, PathExtension).Exists() || gjson.GetBytes(out, "instructions").String() != p.System {
				t.Fatalf("bad upstream body %s", out)
			}
			for _, it := range gjson.GetBytes(out, "input").Array() {
				if role := it.Get("role").String(); role == "system" || role == "developer" {
					t.Fatalf("%s item left in input: %s", role, out)
				}
			}
		}
		if m, err := ParseMessages(body); err == nil {
			kept := m.Tools
			if len(kept) > 0 {
				kept = kept[1:]
			}
			_ = MessagesToolChoice(body, kept)
			p := Build(tmpl, Layers{Application: m.Application, Tools: kept, NativeTools: m.NativeTools}, DefaultSettings())
			out, err := RewriteMessages(body, p, kept, len(kept) < len(m.Tools))
			if err != nil {
				t.Fatalf("RewriteMessages: %v", err)
			}
			if !gjson.ValidBytes(out) || gjson.GetBytes(out, PathExtension).Exists() || gjson.GetBytes(out, "system").String() != p.System {
				t.Fatalf("bad upstream body %s", out)
			}
		}
	})
}
