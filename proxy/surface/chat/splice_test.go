package chat

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
)

// rewriteChatReference is RewriteChat made edit by edit with sjson, as it was before the one-pass splice:
// the bytes RewriteChat must keep giving.
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

// TestRewriteChatSpliceSameBytes checks that the one-pass rewrite gives the very bytes of the edit-by-edit
// one, whatever the members' order, the whitespace around them, and which tools go.
func TestRewriteChatSpliceSameBytes(t *testing.T) {
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
						if want := rewriteChatReference(t, body, p, kept, removed); !bytes.Equal(got, want) {
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

// TestDeleteTailItemEscapedKey covers the back-search over a key with escaped quotes, as sjson does it.
func TestDeleteTailItemEscapedKey(t *testing.T) {
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
		if want := rewriteChatReference(t, []byte(body), p, nil, false); !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", body, got, want)
		}
	}
}
