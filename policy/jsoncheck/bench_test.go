package jsoncheck

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// chatRequest returns a realistic chat-completions body of about size bytes: a few tools with
// JSON schemas, a system message and alternating user/assistant turns of prose with quotes,
// newlines and tabs (so the strings hold escapes, as real ones do).
func chatRequest(size int) []byte {
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
	req := struct {
		Model       string  `json:"model"`
		Temperature float64 `json:"temperature"`
		Stream      bool    `json:"stream"`
		Tools       []tool  `json:"tools"`
		Messages    []msg   `json:"messages"`
	}{Model: "gpt-4o-mini", Temperature: 0.2, Stream: true}
	for i := 0; i < 2; i++ {
		req.Tools = append(req.Tools, tool{Type: "function", Function: fn{
			Name:        fmt.Sprintf("search_docs_%d", i),
			Description: "Search the internal documentation and return the best matching passages.",
			Parameters: map[string]any{
				"type": "object",
				"properties": map[string]any{
					"query": map[string]any{"type": "string", "description": "what to look for"},
					"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 20},
				},
				"required": []string{"query"},
			},
		}})
	}
	req.Messages = append(req.Messages, msg{"system", "You are a helpful assistant for the payments team. Answer briefly."})
	prose := "The quick brown fox jumps over the lazy dog while the \"build\" pipeline runs its tests.\n\tThen it naps. "
	for i := 0; ; i++ {
		b, _ := json.Marshal(req)
		if len(b) >= size {
			return b
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		n := min(6, (size-len(b))/len(prose)+1)
		req.Messages = append(req.Messages, msg{role, strings.Repeat(prose, n)})
	}
}

func benchValidators(b *testing.B, body []byte) {
	b.Run("jsoncheck.Object", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if err := Object(body, Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Valid", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if !json.Valid(body) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("gjson.ValidBytes", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if !gjson.ValidBytes(body) {
				b.Fatal("invalid")
			}
		}
	})
}

func BenchmarkChat2K(b *testing.B)  { benchValidators(b, chatRequest(2<<10)) }
func BenchmarkChat40K(b *testing.B) { benchValidators(b, chatRequest(40<<10)) }

// BenchmarkManyKeys measures duplicate detection on one object with 5000 keys (the map path).
func BenchmarkManyKeys(b *testing.B) { benchValidators(b, []byte(manyKeys(5000, -1, false))) }

// toolArgs are typical tool-call arguments: a few keys, a nested object and an array.
const toolArgs = `{"query":"refund policy for EU customers","limit":5,"filters":{"lang":"en","tags":["billing","refunds"]}}`

// BenchmarkToolArgs checks typical tool-call arguments with only exact duplicates refused (as
// request bodies are) and with FoldedKeys (as tool-call arguments are), side by side.
func BenchmarkToolArgs(b *testing.B) {
	benchLimits(b, []byte(toolArgs))
}

// BenchmarkToolArgsKeys checks arguments of one object with many keys (the hash-set path), ASCII
// and Greek (every rune folded through its orbit), at two sizes: the cost per byte stays the same.
func BenchmarkToolArgsKeys(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		ascii := manyKeys(n, -1, false)
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) { benchLimits(b, []byte(ascii)) })
		greek := strings.ReplaceAll(ascii, `"k`, `"ςΣκ\u039a`)
		b.Run(fmt.Sprintf("greek=%d", n), func(b *testing.B) { benchLimits(b, []byte(greek)) })
	}
}

func benchLimits(b *testing.B, body []byte) {
	for _, c := range []struct {
		name string
		l    Limits
	}{{"exact", Limits{}}, {"folded", Limits{FoldedKeys: true}}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Object(body, c.l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
