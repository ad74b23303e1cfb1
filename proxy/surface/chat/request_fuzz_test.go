package chat

import (
	"encoding/json"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// FuzzRewriteChat feeds request bodies that pass the proxy's JSON check through the parsers and the
// rewrite: nothing panics, and whenever ParseChat accepts a body, the upstream body is valid JSON
// without the promptgate field, and its messages start with the one system message followed by the
// client's other messages.
func FuzzRewriteChat(f *testing.F) {
	f.Add([]byte(oddBody))
	f.Add([]byte(`{"promptgate":{"user":"u"},"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":"required"}`))
	f.Add([]byte(`{"messages":[{"role":"system","content":[{"type":"text","text":"=== X ==="}]}],"functions":[{"name":"f"}],"function_call":{"name":"f"}}`))
	f.Add([]byte(`{"promptg\u0061te":{},"m\u0065ssages":[]}`))
	f.Add([]byte(`{"messages":[null]}`))
	f.Add([]byte(`{"web_search_options":{},"promptgate":{},"messages":[],"tools":[{"type":"function","function":{"name":"web_search"}}]}`))
	f.Add([]byte(`{"messages":[],"web\u005fsearch_options":{"search_context_size":"low"},"tools":[{"type":"function","function":{"name":"a"}}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if jsoncheck.Object(body, jsoncheck.Limits{}) != nil {
			return
		}
		_, _ = assembly.NewBody(body).Extension()
		c, err := parseChat(body)
		if err != nil {
			return
		}
		kept := c.Tools
		if len(kept) > 0 {
			kept = kept[1:] // remove the first declared tool
		}
		_ = chatToolChoice(body, kept)
		p := assembly.Build(assembly.ParseTemplate("t", 1, assemblytest.LayeredText), assembly.Layers{Application: c.Application, Tools: kept, NativeTools: c.NativeTools}, assembly.DefaultSettings())
		out, err := rewriteChat(body, p, kept, len(kept) < len(c.Tools))
		if err != nil {
			t.Fatalf("RewriteChat: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON out: %s", out)
		}
		if ref := rewriteChatReference(t, body, p, kept, len(kept) < len(c.Tools)); assemblytest.Members(out) != assemblytest.Members(ref) {
			t.Fatalf("one-pass rewrite differs from the edit-by-edit one:\n%s\n%s", out, ref)
		}
		if gjson.GetBytes(out, assembly.PathExtension).Exists() {
			t.Fatalf("promptgate left in: %s", out)
		}
		if gjson.GetBytes(out, reqWebSearchOptions).IsObject() && !assembly.NameSet(kept)[ToolWebSearch] {
			t.Fatalf("web_search_options left in with %s not kept: %s", ToolWebSearch, out)
		}
		msgs := gjson.GetBytes(out, "messages").Array()
		if len(msgs) == 0 || msgs[0].Get("role").String() != "system" || msgs[0].Get("content").String() != p.System() {
			t.Fatalf("first message is not the system prompt: %s", out)
		}
		var client []string
		gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
			if r := m.Get("role").String(); r != "system" && r != "developer" {
				client = append(client, m.Raw)
			}
			return true
		})
		if len(msgs)-1 != len(client) {
			t.Fatalf("%d client messages became %d: %s", len(client), len(msgs)-1, out)
		}
		for i, m := range msgs[1:] {
			if m.Raw != client[i] {
				t.Fatalf("message %d %s became %s", i, client[i], m.Raw)
			}
		}
		if len(kept) == 0 && len(c.Tools) > 0 && gjson.GetBytes(body, "tools").IsArray() {
			for _, k := range []string{"tools", "tool_choice", "parallel_tool_calls"} {
				if gjson.GetBytes(out, k).Exists() {
					t.Fatalf("%s left with no tool kept: %s", k, out)
				}
			}
		}
	})
}
