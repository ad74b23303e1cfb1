// Package assemblytest holds what the tests of the request surfaces (proxy/surface/...) share: a small
// layered template, a check of the policy errors a request parser returns, and the names of declared tools.
// It is for tests only.
package assemblytest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/store/builtin"
)

// LayeredText is a small layered template with every block, in the contract's order.
const LayeredText = "=== SYSTEM CORE ===\nCore rules.\n\n" +
	"=== PROTOCOL RULES ===\n{{protocol_rules}}\n\n" +
	"=== APPLICATION INSTRUCTIONS ===\n{{application_instructions}}\n\n" +
	"=== RUNTIME DIRECTIVES ===\n{{runtime_directives}}\n\n" +
	assembly.ContextHeader + "\n{{runtime_context}}\n\n" +
	"=== AVAILABLE TOOLS ===\n{{tools}}\n"

// Layered is LayeredText parsed.
func Layered() *assembly.Template { return assembly.ParseTemplate("t", 1, LayeredText) }

// WantPolicyError checks that err is a *policy.Error with the code and param.
func WantPolicyError(t testing.TB, err error, code, param string) {
	t.Helper()
	var pe *policy.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v (%T), want a *policy.Error", err, err)
	}
	if pe.Code != code || pe.Param != param {
		t.Errorf("error = {%s %q} %q, want {%s %q}", pe.Code, pe.Param, pe.Message, code, param)
	}
}

// ToolNames are the names of tools, in order.
func ToolNames(ts []policy.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

// Builtin is the built-in template name, parsed (version 0).
func Builtin(tb testing.TB, name string) *assembly.Template {
	tb.Helper()
	d, ok := builtin.Template(name)
	if !ok {
		tb.Fatalf("no built-in template %s", name)
	}
	return assembly.ParseTemplate(d.Name, 0, d.Text)
}

// DatamarkSeeds are bodies with tool output of every surface, for the fuzz targets of datamarking.
func DatamarkSeeds() [][]byte {
	return [][]byte{
		[]byte(`{"messages":[{"role":"tool","content":"x y"},{"role":"tool","content":[{"type":"text","text":"p q"}]},{"role":"user","content":[{"type":"tool_result","content":"a b"}]}],"input":[{"type":"function_call_output","output":"o p"}]}`),
		[]byte(`{"messages":[{"r\u006fle":"tool","c\u006fntent":"a\u2028b"}],"input":"x y"}`),
		[]byte(`{"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":" "},7]}]}]}`),
	}
}

// CheckDatamark checks a surface's datamarking of a body that passes the proxy's JSON check: it never fails,
// gives valid JSON, keeps every item of the conversation (messages, input) with its role and type, and is
// idempotent.
func CheckDatamark(t *testing.T, mark func([]byte) ([]byte, error), body []byte) {
	t.Helper()
	out, err := mark(body)
	if err != nil {
		t.Fatal(err)
	}
	if !gjson.ValidBytes(out) || jsoncheck.Object(out, jsoncheck.Limits{}) != nil {
		t.Fatalf("invalid JSON out: %s", out)
	}
	for _, items := range []string{"messages", "input"} {
		a, b := gjson.GetBytes(out, items), gjson.GetBytes(body, items)
		if a.IsArray() != b.IsArray() || len(a.Array()) != len(b.Array()) {
			t.Fatalf("%s changed shape: %s", items, out)
		}
		for i, it := range a.Array() {
			if it.Get("role").String() != b.Array()[i].Get("role").String() || it.Get("type").String() != b.Array()[i].Get("type").String() {
				t.Fatalf("%s item %d changed: %s", items, i, it.Raw)
			}
		}
	}
	again, err := mark(out)
	if err != nil || string(again) != string(out) {
		t.Fatalf("not idempotent: %s -> %s (%v)", out, again, err)
	}
}

// Marked checks that mark turns in into want, case by case.
func Marked(t *testing.T, mark func([]byte) ([]byte, error), cases []struct{ Name, In, Want string }) {
	t.Helper()
	for _, c := range cases {
		got, err := mark([]byte(c.In))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if string(got) != c.Want {
			t.Errorf("%s:\n got %s\nwant %s", c.Name, got, c.Want)
		}
	}
}

// RewriteSeeds are request bodies of the Responses and Messages surfaces, for their rewrite fuzz targets.
func RewriteSeeds() [][]byte {
	return [][]byte{
		[]byte(`{"model":"m","instructions":"i","input":[{"role":"developer","content":"d"},{"role":"user","content":"u"}],"tools":[{"type":"function","name":"f"},{"type":"mcp"},{"type":"mcp"}],"tool_choice":"required","promptgate":{}}`),
		[]byte(`{"input":"hi","tools":[{"type":"web_search"}],"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"web_search"}]}}`),
		[]byte(`{"system":[{"type":"text","text":"=== X ==="}],"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"},{"type":"bash_20250124","name":"bash"}],"tool_choice":{"type":"tool","name":"f"}}`),
		[]byte(`{"promptg\u0061te":{},"m\u0065ssages":[],"inp\u0075t":[]}`),
	}
}

// Rewriters are a surface's three request rewrites: the one the proxy calls, the one-copy splice and the
// edit-by-edit reference it falls back to.
type Rewriters struct {
	Rewrite func(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error)
	Spliced func(b *assembly.Body, p *assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, bool)
	Edits   func(body []byte, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error)
}

// SameAsEdits runs body through r.Rewrite (on a Body walked, and on one made from the validation's record,
// as the pipeline makes it), r.Spliced alone and r.Edits (on the body without its runtime context, as
// Rewrite falls back to it, and on the body itself), and fails unless all that answer give the same bytes,
// or the same error. spliced tells whether Rewrite's answer is the splice's.
func SameAsEdits(t *testing.T, r Rewriters, body []byte, p assembly.Prompt, kept []policy.Tool, removed bool) (out []byte, spliced bool) {
	t.Helper()
	out, err := r.Rewrite(assembly.NewBody(body), p, kept, removed)
	ref, refErr := r.Edits(assembly.NewBody(body).WithoutContext(), p, kept, removed)
	raw, rawErr := r.Edits(body, p, kept, removed)
	if errText(err) != errText(refErr) || errText(rawErr) != errText(refErr) {
		t.Fatalf("%s: errors differ: rewrite %v, edit by edit %v, on the whole body %v", body, err, refErr, rawErr)
	}
	if !bytes.Equal(out, ref) || !bytes.Equal(raw, ref) {
		t.Fatalf("%s: bodies differ:\n rewrite      %s\n edit by edit %s\n whole body   %s", body, out, ref, raw)
	}
	var m jsoncheck.Members
	if jsoncheck.ObjectMembers(body, jsoncheck.Limits{}, assembly.PathExtension, &m) == nil {
		of, err := r.Rewrite(assembly.NewBodyOf(body, &m), p, kept, removed)
		if errText(err) != errText(refErr) || !bytes.Equal(of, ref) {
			t.Fatalf("%s: on the validation's record: %v\n rewrite      %s\n edit by edit %s", body, err, of, ref)
		}
	}
	marked := p.DatamarkToolOutput
	if marked { // the splice does not datamark: it must give the bytes of the edits without it
		p.DatamarkToolOutput = false
		if ref, refErr = r.Edits(assembly.NewBody(body).WithoutContext(), p, kept, removed); refErr != nil {
			return out, false
		}
	}
	sp, spliced := r.Spliced(assembly.NewBody(body), &p, kept, removed)
	if spliced && !bytes.Equal(sp, ref) {
		t.Fatalf("%s: the splice differs from the edits:\n splice       %s\n edit by edit %s", body, sp, ref)
	}
	return out, spliced && !marked
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
