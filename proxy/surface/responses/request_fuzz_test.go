package responses

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// FuzzRewrite feeds bodies that pass the proxy's JSON check through the surface's parser and rewrite: nothing
// panics, and whenever the parser accepts a body, the upstream body is valid JSON without the promptgate
// field, with the prompt where the surface takes it, and with no system or developer input item left.
func FuzzRewrite(f *testing.F) {
	for _, s := range assemblytest.RewriteSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if jsoncheck.Object(body, jsoncheck.Limits{}) != nil {
			return
		}
		tmpl := assemblytest.Layered()
		if r, err := parseResponses(body); err == nil {
			kept := r.Tools
			if len(kept) > 0 {
				kept = kept[1:]
			}
			_ = responsesToolChoice(body, kept)
			p := assembly.Build(tmpl, assembly.Layers{Application: r.Application, Tools: kept, NativeTools: r.NativeTools}, assembly.DefaultSettings())
			out, err := rewrite(body, p, kept, len(kept) < len(r.Tools))
			if err != nil {
				t.Fatalf("RewriteResponses: %v", err)
			}
			if !gjson.ValidBytes(out) || gjson.GetBytes(out, assembly.PathExtension).Exists() || gjson.GetBytes(out, "instructions").String() != p.System() {
				t.Fatalf("bad upstream body %s", out)
			}
			for _, it := range gjson.GetBytes(out, "input").Array() {
				if role := it.Get("role").String(); role == "system" || role == "developer" {
					t.Fatalf("%s item left in input: %s", role, out)
				}
			}
		}
	})
}
