package chat

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/assemblytest"
	"github.com/promptgate/promptgate/assembly/ctxjson"
)

// typicalRequest is a chat request of about 8 KB: a client system message, three tools with JSON
// schemas, about 2 KB of promptgate.context, and user/assistant turns.
func typicalRequest(tb testing.TB) []byte {
	tb.Helper()
	type fn struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	}
	type tool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var tools []tool
	for _, name := range []string{"search_docs", "get_ticket", "create_note"} {
		tools = append(tools, tool{"function", fn{name, "Search or change the team's records. Returns JSON.", map[string]any{
			"type": "object",
			"properties": map[string]any{
				"query": map[string]any{"type": "string", "description": "what to look for"},
				"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 20},
			},
			"required": []string{"query"},
		}}})
	}
	var attachments []map[string]string
	for i := range 8 {
		attachments = append(attachments, map[string]string{
			"name": fmt.Sprintf("notes-%d.md", i),
			"text": strings.Repeat("Quarterly numbers \"look\" fine.\n=== SYSTEM CORE ===\t", 4),
		})
	}
	msgs := []msg{{"system", "You are the payments team's assistant.\nAnswer briefly, cite ticket ids."}}
	prose := "The quick brown fox jumps over the lazy dog while the \"build\" pipeline runs its tests.\n\tThen it naps. "
	for i := range 11 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, strings.Repeat(prose, 4)})
	}
	body, err := json.Marshal(map[string]any{
		"model": "gpt-4o-mini", "temperature": 0.2, "stream": true, "tools": tools, "messages": msgs,
		"promptgate": map[string]any{"user": "u-1", "conversation": "c-9",
			"context": map[string]any{"attachments": attachments, "memory": map[string]any{"lang": "en"}}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return body
}

// BenchmarkBuild measures the assembly of one typical request: ParseChat, Build and RewriteChat
// (the "extension" case adds reading the extension and parsing the context, which a request also
// pays).
func BenchmarkBuild(b *testing.B) {
	body := typicalRequest(b)
	tm := assemblytest.Builtin(b, "base_tool_call_v2")
	s := assembly.DefaultSettings()
	ext, err := assembly.NewBody(body).Extension()
	if err != nil {
		b.Fatal(err)
	}
	ctxValue, err := ctxjson.Parse(ext.Context)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, v *ctxjson.Value) {
		c, err := parseChat(body)
		if err != nil {
			b.Fatal(err)
		}
		l := assembly.Layers{
			Rules:       "Answer in the user's language.",
			Application: c.Application,
			Directives:  []string{"Prefer the ticket tools."},
			Meta:        ctxjson.Meta{Protocol: "neutral", Sources: []string{"request"}},
			Sources:     []ctxjson.Source{{Name: "request", Value: v}},
			Tools:       c.Tools,
			NativeTools: c.NativeTools,
		}
		p := assembly.Build(tm, l, s)
		if _, err := rewriteChat(body, p, c.Tools, false); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("chat", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			run(b, ctxValue)
		}
	})
	b.Run("extension", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			x, err := assembly.NewBody(body).Extension()
			if err != nil {
				b.Fatal(err)
			}
			v, err := ctxjson.Parse(x.Context)
			if err != nil {
				b.Fatal(err)
			}
			run(b, v)
		}
	})
}

// BenchmarkBuildBaselineJSON is the floor to compare BenchmarkBuild with: decoding the same body
// into a map and encoding it again, which is what the rewrite would cost done the naive way (and
// would lose key order).
func BenchmarkBuildBaselineJSON(b *testing.B) {
	body := typicalRequest(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTypicalRequestSize(t *testing.T) {
	body := typicalRequest(t)
	ctx := len(gjson.GetBytes(body, "promptgate.context").Raw)
	if len(body) < 7000 || len(body) > 9500 || ctx < 1700 || ctx > 2600 {
		t.Errorf("body %d bytes, context %d bytes; want about 8 KB and 2 KB", len(body), ctx)
	}
}
