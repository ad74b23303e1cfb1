package responses

import (
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// FuzzRewrite feeds bodies that pass the proxy's JSON check through the surface's parser and
// rewrite: nothing panics, and whenever the parser accepts a body, the upstream body is valid JSON
// without the promptgate field, with the prompt where the surface takes it, and with no system or
// developer input item left; and it is, byte for byte, the body the edit-by-edit rewrite makes
// (sameAsEdits), whichever tools are kept.
func FuzzRewrite(f *testing.F) {
	for _, s := range assemblytest.RewriteSeeds() {
		f.Add(s)
	}
	for _, s := range spliceSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if jsoncheck.Object(body, jsoncheck.Limits{}) != nil {
			return
		}
		tmpl := assemblytest.Layered()
		r, err := parseResponses(body)
		if err != nil {
			return
		}
		for _, kept := range keptVariants(r.Tools) {
			_ = responsesToolChoice(body, kept)
			p := assembly.Build(tmpl, assembly.Layers{Application: r.Application, Tools: kept, NativeTools: r.NativeTools}, assembly.DefaultSettings())
			out := sameAsEdits(t, body, p, kept, len(kept) < len(r.Tools))
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

// keptVariants are the kept tools the fuzz tests try: all but the first, all but the last, none,
// all.
func keptVariants(tools []policy.Tool) [][]policy.Tool {
	if len(tools) == 0 {
		return [][]policy.Tool{nil}
	}
	return [][]policy.Tool{tools[1:], tools[:len(tools)-1], nil, tools}
}
