package chat

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy"
)

// rewriteChatReference is the rewrite made edit by edit with sjson, as it was before the one
// executor: the document the executor must keep giving.
func rewriteChatReference(t testing.TB, body []byte, p assembly.Prompt, kept []policy.Tool, removedAny bool) []byte {
	t.Helper()
	var msgs bytes.Buffer
	msgs.WriteString(`[{"role":"system","content":`)
	msgs.Write(assembly.JSONString(p.System()))
	msgs.WriteByte('}')
	if p.ContextMessage != "" {
		msgs.WriteString(`,{"role":"system","content":`)
		msgs.Write(assembly.JSONString(p.ContextMessage))
		msgs.WriteByte('}')
	}
	gjson.GetBytes(body, reqMessages).ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").String() {
		case "system", "developer":
			return true
		}
		msgs.WriteByte(',')
		msgs.WriteString(m.Raw)
		return true
	})
	msgs.WriteByte(']')
	out, err := rewriteChatEdits(body, msgs.Bytes(), kept, removedAny)
	if err != nil {
		t.Fatalf("reference rewrite: %v", err)
	}
	return out
}

// TestRewriteChatSameAsReference checks that the executor gives the document of the edit-by-edit
// rewrite, whatever the members' order, the whitespace around them, and which tools go.
func TestRewriteChatSameAsReference(t *testing.T) {
	members := map[string]string{
		"model":              `"gpt-4o-mini"`,
		"messages":           `[{"role":"system","content":"be kind"},{"role":"user","content":"hi"} , {"role":"developer","content":"x"},{"role":"assistant","content":"yo"}]`,
		"tools":              `[{"type":"function","function":{"name":"a"}},{"type":"function","function":{"name":"b"}},{"type":"function","function":{"name":"a"}}]`,
		"functions":          `[{"name":"f"},{"name":"b"}]`,
		"promptgate":         `{"user":"u","context":{"k":"v"}}`,
		"tool_choice":        `"auto"`,
		"web_search_options": `{"search_context_size":"low"}`,
	}
	orders := [][]string{
		{"model", "messages", "tools", "functions", "promptgate", "tool_choice"},
		{"promptgate", "messages", "tools", "model"},
		{"messages", "promptgate"},
		{"tools", "promptgate", "functions", "messages"},
		{"messages", "functions", "tools", "tool_choice", "promptgate"},
		{"promptgate", "model", "messages"},
		{"messages", "model"},
		{"web_search_options", "promptgate", "messages"},
		{"promptgate", "web_search_options", "messages", "tools"},
		{"messages", "web_search_options", "model", "promptgate"},
		{"tools", "web_search_options"},
		{"model", "messages", "web_search_options"},
	}
	seps := []struct{ open, sep, colon, close string }{
		{"{", ",", ":", "}"},
		{"{ ", " , ", " : ", " }"},
		{"{\n  ", ",\n  ", ": ", "\n}"},
		{"\t{\t", "\t,\r\n", "\t:\t", "\t}\t"},
	}
	keptSets := [][]policy.Tool{
		nil,
		{{Name: "a"}},
		{{Name: "b"}},
		{{Name: "a"}, {Name: "f"}},
		{{Name: "a"}, {Name: "b"}, {Name: "f"}},
		{{Name: ToolWebSearch}},
		{{Name: "a"}, {Name: ToolWebSearch}},
	}
	withContext := assembly.NewPrompt("core")
	withContext.ContextMessage = "{\"ctx\":1}"
	prompts := []assembly.Prompt{assembly.NewPrompt("=== SYSTEM CORE ===\n<b>&\"x\"\u2028"), withContext}
	n := 0
	for _, order := range orders {
		for _, s := range seps {
			var b strings.Builder
			b.WriteString(s.open)
			for i, k := range order {
				if i > 0 {
					b.WriteString(s.sep)
				}
				b.WriteString(`"` + k + `"` + s.colon + members[k])
			}
			b.WriteString(s.close)
			body := []byte(b.String())
			for _, kept := range keptSets {
				for _, removed := range []bool{false, true} {
					for _, p := range prompts {
						got, err := rewriteChat(body, p, kept, removed)
						if err != nil {
							t.Fatalf("%s: %v", body, err)
						}
						if want := rewriteChatReference(t, body, p, kept, removed); assemblytest.Members(got) != assemblytest.Members(want) {
							t.Fatalf("%s, kept %v, removed %v:\n got %s\nwant %s", body, kept, removed, got, want)
						}
						n++
					}
				}
			}
		}
	}
	t.Logf("%d cases", n)
}

// TestRewriteChatEscapedKeys covers members whose keys hold escaped quotes, and a null promptgate.
func TestRewriteChatEscapedKeys(t *testing.T) {
	for _, body := range []string{
		`{"a\"b":1,"promptgate":{},"messages":[]}`,
		`{"a":"x\",\"y","promptgate" :{"user":"u"} ,"messages":[]}`,
		`{"promptgate":null,"messages":[]}`,
	} {
		p := assembly.NewPrompt("s")
		got, err := rewriteChat([]byte(body), p, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := rewriteChatReference(t, []byte(body), p, nil, false); assemblytest.Members(got) != assemblytest.Members(want) {
			t.Errorf("%s:\n got %s\nwant %s", body, got, want)
		}
	}
}

// rewriteChatEdits is the rewrite made edit by edit with sjson, each edit copying the body, as it
// was before the one executor: the reference the executor's documents must equal.
func rewriteChatEdits(body, msgs []byte, kept []policy.Tool, removedAny bool) ([]byte, error) {
	out, err := sjson.SetRawBytes(body, reqMessages, msgs)
	if err != nil {
		return nil, fmt.Errorf("assembly: set messages: %w", err)
	}
	if removedAny {
		if out, err = filterToolArrays(out, kept); err != nil {
			return nil, err
		}
	}
	if assembly.Get(out, reqWebSearchOptions).IsObject() && !assembly.NameSet(kept)[ToolWebSearch] {
		if out, err = sjson.DeleteBytes(out, reqWebSearchOptions); err != nil {
			return nil, fmt.Errorf("assembly: remove web_search_options: %w", err)
		}
	}
	if assembly.Get(out, assembly.PathExtension).Exists() {
		if out, err = sjson.DeleteBytes(out, assembly.PathExtension); err != nil {
			return nil, fmt.Errorf("assembly: remove promptgate field: %w", err)
		}
	}
	return out, nil
}

// filterToolArrays keeps, in "tools" and "functions", the first entry of each kept name. An array
// left empty is removed together with tool_choice / function_call and parallel_tool_calls, which
// the API only accepts alongside tools.
func filterToolArrays(body []byte, kept []policy.Tool) ([]byte, error) {
	keptSet := make(map[string]bool, len(kept))
	for _, t := range kept {
		keptSet[t.Name] = true
	}
	used := map[string]bool{}
	var err error
	filter := func(path string, name func(gjson.Result) string, deps ...string) {
		arr := assembly.Get(body, path)
		if err != nil || !arr.IsArray() {
			return
		}
		var b bytes.Buffer
		b.WriteByte('[')
		n := 0
		arr.ForEach(func(_, v gjson.Result) bool {
			nm := name(v)
			if keptSet[nm] && !used[nm] {
				used[nm] = true
				if n > 0 {
					b.WriteByte(',')
				}
				b.WriteString(v.Raw)
				n++
			}
			return true
		})
		b.WriteByte(']')
		if n == 0 {
			for _, p := range append([]string{path}, deps...) {
				if assembly.Get(body, p).Exists() {
					if body, err = sjson.DeleteBytes(body, p); err != nil {
						return
					}
				}
			}
			return
		}
		body, err = sjson.SetRawBytes(body, path, b.Bytes())
	}
	filter(reqTools, func(v gjson.Result) string { return chatTool(v).Name }, reqToolChoice, reqParallelCalls)
	filter(reqFunctions, func(v gjson.Result) string { return v.Get("name").String() }, reqFunctionCall)
	if err != nil {
		return nil, fmt.Errorf("assembly: filter tools: %w", err)
	}
	return body, nil
}
