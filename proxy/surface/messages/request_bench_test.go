package messages

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
)

// conversationRequest is a Messages request of about 4 KB: three tools with JSON schemas,
// user/assistant turns, a promptgate member with a small context, and, with system, the client's
// system prompt.
func conversationRequest(tb testing.TB, system bool) []byte {
	tb.Helper()
	type tool struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		InputSchema map[string]any `json:"input_schema"`
	}
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var tools []tool
	for _, name := range []string{"search_docs", "get_ticket", "create_note"} {
		tools = append(tools, tool{name, "Search or change the team's records. Returns JSON.", map[string]any{
			"type":       "object",
			"properties": map[string]any{"query": map[string]any{"type": "string"}, "limit": map[string]any{"type": "integer"}},
			"required":   []string{"query"},
		}})
	}
	var msgs []msg
	prose := "The quick brown fox jumps over the lazy dog while the \"build\" pipeline runs its tests.\n\tThen it naps. "
	for i := range 9 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, strings.Repeat(prose, 4)})
	}
	m := map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": true, "tools": tools, "messages": msgs,
		"promptgate": map[string]any{"user": "u-1", "conversation": "c-9", "context": map[string]any{"lang": "en"}}}
	if system {
		m["system"] = "You are the payments team's assistant.\nAnswer briefly, cite ticket ids."
	}
	body, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// BenchmarkRewrite measures the rewrite of a conversation with one of its three tools removed: with
// the client's system replaced, and with none (system added).
func BenchmarkRewrite(b *testing.B) {
	for _, c := range []struct {
		name   string
		system bool
	}{{"system", true}, {"no-system", false}} {
		body := conversationRequest(b, c.system)
		r, err := parseMessages(body)
		if err != nil {
			b.Fatal(err)
		}
		kept := r.Tools[1:]
		p := assembly.Build(assemblytest.Layered(), assembly.Layers{Application: r.Application, Tools: kept, NativeTools: true}, assembly.DefaultSettings())
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := (Surface{}).Rewrite(assembly.NewBody(body), p, kept, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
