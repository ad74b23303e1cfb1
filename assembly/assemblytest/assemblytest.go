// Package assemblytest holds what the tests of the request surfaces (proxy/surface/...) share: a
// small layered template, a check of the policy errors a request parser returns, and the names of
// declared tools. It is for tests only.
package assemblytest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

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

// CheckDatamark checks a surface's datamarking of a body that passes the proxy's JSON check: it
// never fails, gives valid JSON, keeps every item of the conversation (messages, input) with its
// role and type, and is idempotent.
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

// RewriteSeeds are request bodies of the Responses and Messages surfaces, for their rewrite fuzz
// targets.
func RewriteSeeds() [][]byte {
	return [][]byte{
		[]byte(`{"model":"m","instructions":"i","input":[{"role":"developer","content":"d"},{"role":"user","content":"u"}],"tools":[{"type":"function","name":"f"},{"type":"mcp"},{"type":"mcp"}],"tool_choice":"required","promptgate":{}}`),
		[]byte(`{"input":"hi","tools":[{"type":"web_search"}],"tool_choice":{"type":"allowed_tools","mode":"required","tools":[{"type":"web_search"}]}}`),
		[]byte(`{"system":[{"type":"text","text":"=== X ==="}],"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"},{"type":"bash_20250124","name":"bash"}],"tool_choice":{"type":"tool","name":"f"}}`),
		[]byte(`{"promptg\u0061te":{},"m\u0065ssages":[],"inp\u0075t":[]}`),
	}
}

// SameAsReference runs body through rewrite (on a Body walked, and on one made from the
// validation's record, as the pipeline makes it) and through reference, the same rewrite made edit
// by edit with sjson (a test's own, from before the one executor: the behaviour rewrite keeps), and
// fails unless all three give the same document — the same top-level members in the same order,
// each with the same value — or the same error. Only the white space between members may differ.
func SameAsReference(t *testing.T, rewrite func(*assembly.Body, assembly.Prompt, []policy.Tool, bool) ([]byte, error),
	reference func([]byte, assembly.Prompt, []policy.Tool, bool) ([]byte, error), body []byte, p assembly.Prompt, kept []policy.Tool, removed bool) []byte {
	t.Helper()
	out, err := rewrite(assembly.NewBody(body), p, kept, removed)
	ref, refErr := reference(body, p, kept, removed)
	if errText(err) != errText(refErr) {
		t.Fatalf("%s: errors differ: rewrite %v, reference %v", body, err, refErr)
	}
	if err != nil {
		return nil
	}
	if Members(out) != Members(ref) {
		t.Fatalf("%s: documents differ:\n rewrite   %s\n reference %s", body, out, ref)
	}
	var m jsoncheck.Members
	if jsoncheck.ObjectMembers(body, jsoncheck.Limits{}, assembly.PathExtension, &m) == nil {
		of, err := rewrite(assembly.NewBodyOf(body, &m), p, kept, removed)
		if err != nil || !bytes.Equal(of, out) {
			t.Fatalf("%s: on the validation's record: %v\n %s\n %s", body, err, of, out)
		}
	}
	if jsoncheck.Object(out, jsoncheck.Limits{MaxDepth: 1000}) != nil {
		t.Fatalf("%s: the rewrite is not one valid object: %s", body, out)
	}
	return out
}

// Members lists a JSON object's top-level members in order, each key with its value's raw text, for
// comparing two documents regardless of the white space between members.
func Members(body []byte) string {
	var b strings.Builder
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		b.WriteString(k.Raw + "=" + v.Raw + "\x00")
		return true
	})
	return b.String()
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FilterTools is the reference rewrites' filter of a tools array, edit by edit with sjson: it
// keeps, in the array at path, the entries whose name is kept (assembly.KeptTools). An array left
// empty is removed together with deps (tool_choice), which the APIs only accept alongside tools.
func FilterTools(body []byte, path string, kept []policy.Tool, name func(gjson.Result) (n string, shared bool), deps ...string) ([]byte, error) {
	arr := assembly.Get(body, path)
	if !arr.IsArray() {
		return body, nil
	}
	b, n := assembly.KeptTools(arr, kept, name)
	var err error
	if n > 0 {
		if body, err = sjson.SetRawBytes(body, path, b); err != nil {
			return nil, fmt.Errorf("assembly: filter tools: %w", err)
		}
		return body, nil
	}
	for _, p := range append([]string{path}, deps...) {
		if assembly.Get(body, p).Exists() {
			if body, err = sjson.DeleteBytes(body, p); err != nil {
				return nil, fmt.Errorf("assembly: filter tools: %w", err)
			}
		}
	}
	return body, nil
}

// RemoveExtension is the reference rewrites' removal of the top-level promptgate field, if any.
func RemoveExtension(body []byte) ([]byte, error) {
	if !assembly.Get(body, assembly.PathExtension).Exists() {
		return body, nil
	}
	out, err := sjson.DeleteBytes(body, assembly.PathExtension)
	if err != nil {
		return nil, fmt.Errorf("assembly: remove promptgate field: %w", err)
	}
	return out, nil
}
