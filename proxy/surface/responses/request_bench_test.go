package responses

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
)

// conversationRequest is a Responses request of about 4 KB: three tools with JSON schemas,
// user/assistant turns, a promptgate member with a small context, and, with instructions, the
// client's own.
func conversationRequest(tb testing.TB, instructions bool) []byte {
	tb.Helper()
	type tool struct {
		Type        string         `json:"type"`
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	}
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var tools []tool
	for _, name := range []string{"search_docs", "get_ticket", "create_note"} {
		tools = append(tools, tool{"function", name, "Search or change the team's records. Returns JSON.", map[string]any{
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
	m := map[string]any{"model": "gpt-4.1", "stream": true, "tools": tools, "input": msgs,
		"promptgate": map[string]any{"user": "u-1", "conversation": "c-9", "context": map[string]any{"lang": "en"}}}
	if instructions {
		m["instructions"] = "You are the payments team's assistant.\nAnswer briefly, cite ticket ids."
	}
	body, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// BenchmarkRewrite measures the rewrite of a conversation with one of its three tools removed: with
// the client's instructions replaced, and with none (instructions added).
func BenchmarkRewrite(b *testing.B) {
	for _, c := range []struct {
		name         string
		instructions bool
	}{{"instructions", true}, {"no-instructions", false}} {
		body := conversationRequest(b, c.instructions)
		r, err := parseResponses(body)
		if err != nil {
			b.Fatal(err)
		}
		kept := r.Tools[1:]
		p := assembly.Build(assemblytest.Layered(), assembly.Layers{Application: r.Application, Tools: kept, NativeTools: true}, assembly.DefaultSettings())
		s := New(Options{})
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Rewrite(assembly.NewBody(body), p, kept, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
