package messages

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// FuzzRewrite feeds bodies that pass the proxy's JSON check through the surface's parser and rewrite: nothing
// panics, and whenever the parser accepts a body, the upstream body is valid JSON without the promptgate
// field, with the prompt where the surface takes it.
func FuzzRewrite(f *testing.F) {
	for _, s := range assemblytest.RewriteSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if jsoncheck.Object(body, jsoncheck.Limits{}) != nil {
			return
		}
		tmpl := assemblytest.Layered()
		if m, err := parseMessages(body); err == nil {
			kept := m.Tools
			if len(kept) > 0 {
				kept = kept[1:]
			}
			_ = messagesToolChoice(body, kept)
			p := assembly.Build(tmpl, assembly.Layers{Application: m.Application, Tools: kept, NativeTools: m.NativeTools}, assembly.DefaultSettings())
			out, err := rewrite(body, p, kept, len(kept) < len(m.Tools))
			if err != nil {
				t.Fatalf("RewriteMessages: %v", err)
			}
			if !gjson.ValidBytes(out) || gjson.GetBytes(out, assembly.PathExtension).Exists() || gjson.GetBytes(out, "system").String() != p.System() {
				t.Fatalf("bad upstream body %s", out)
			}
		}
	})
}
