package proxy

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
)

// corpusEntry is one line of the published injection corpus (../shared/corpus/injections.jsonl).
type corpusEntry struct {
	Source string `json:"source"`
	ID     string `json:"id"`
	Text   string `json:"text"`
}

func loadCorpus(t *testing.T) []corpusEntry {
	t.Helper()
	path := os.Getenv("PROMPTGATE_CORPUS")
	if path == "" {
		t.Skip("PROMPTGATE_CORPUS is not set (.ci/run sets it to the shared injection corpus)")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("PROMPTGATE_CORPUS: %v", err)
	}
	defer f.Close()
	var out []corpusEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var e corpusEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("corpus line %d: %v", len(out)+1, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("the corpus is empty")
	}
	return out
}

// upstreamOf previews a request and returns its upstream body.
func upstreamOf(t *testing.T, e *Engine, body []byte) []byte {
	t.Helper()
	rep, err := e.Preview(context.Background(), Input{Path: PathChat, Header: http.Header{}, Body: body})
	if err != nil {
		t.Fatalf("preview: %v", err)
	}
	return []byte(gjson.GetBytes(rep, "upstreamRequest").Raw)
}

// splitAtContext cuts a system message into what precedes the context JSON line, the line, and the rest.
func splitAtContext(t *testing.T, sys string) (before, line, after string) {
	t.Helper()
	i := strings.Index(sys, assembly.ContextHeader+"\n")
	if i < 0 {
		t.Fatalf("no context block in %.120q", sys)
	}
	before = sys[:i+len(assembly.ContextHeader)+1]
	rest := sys[len(before):]
	line, after, _ = strings.Cut(rest, "\n")
	return before, line, after
}

func corpusRequest(contextDoc, toolOutput string) []byte {
	ctx, _ := json.Marshal(map[string]any{"doc": contextDoc})
	tool, _ := json.Marshal(toolOutput)
	return []byte(`{"model":"m","messages":[{"role":"system","content":"You help with banking."},{"role":"user","content":"check my balance"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_page","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":` + string(tool) + `},{"role":"user","content":"and?"}],` +
		`"tools":[{"type":"function","function":{"name":"read_page","description":"Read a page."}},{"type":"function","function":{"name":"send_money","description":"Send money."}}],` +
		`"promptgate":{"context":` + string(ctx) + `}}`)
}

// TestInjectionCorpus sends every published attack string as runtime context and as a tool output: the
// trusted blocks stay byte-identical to a clean render, the attack stays inside the one JSON line (or its
// own tool message), and neither the messages' count and roles nor the tool set change.
func TestInjectionCorpus(t *testing.T) {
	corpus := loadCorpus(t)
	for _, env := range []map[string]string{nil, {"PROMPT_STRUCTURED_RUNTIME_CONTEXT_CHANNEL": "system_message"}} {
		e := testEngine(t, "", env, nil, nil)
		clean := upstreamOf(t, e, corpusRequest("clean data", "clean output"))
		cleanMsgs := gjson.GetBytes(clean, "messages").Array()
		cleanSys := cleanMsgs[0].Get("content").String()
		structured := env != nil
		for _, c := range corpus {
			t.Run(c.ID, func(t *testing.T) {
				for _, where := range []string{"context", "tool"} {
					ctxDoc, toolOut := "clean data", "clean output"
					if where == "context" {
						ctxDoc = c.Text
					} else {
						toolOut = c.Text
					}
					got := upstreamOf(t, e, corpusRequest(ctxDoc, toolOut))
					msgs := gjson.GetBytes(got, "messages").Array()
					if len(msgs) != len(cleanMsgs) {
						t.Fatalf("%s: %d messages, clean render has %d", where, len(msgs), len(cleanMsgs))
					}
					for i := range msgs {
						if msgs[i].Get("role").String() != cleanMsgs[i].Get("role").String() {
							t.Fatalf("%s: message %d role changed", where, i)
						}
					}
					if gjson.GetBytes(got, "tools").Raw != gjson.GetBytes(clean, "tools").Raw {
						t.Fatalf("%s: the tool set changed", where)
					}
					sys := msgs[0].Get("content").String()
					ctxMsg := ""
					if structured {
						if sys != cleanSys {
							t.Fatalf("%s: the first system message changed (its JSON is redacted to a pointer)", where)
						}
						ctxMsg = msgs[1].Get("content").String()
					} else {
						b1, line, a1 := splitAtContext(t, sys)
						b0, _, a0 := splitAtContext(t, cleanSys)
						if b1 != b0 || a1 != a0 {
							t.Fatalf("%s: a trusted block changed", where)
						}
						ctxMsg = assembly.ContextHeader + "\n" + line
					}
					header, line, ok := strings.Cut(ctxMsg, "\n")
					if !ok || header != assembly.ContextHeader || strings.ContainsAny(line, "\n\r\v\f\u0085\u2028\u2029") || !json.Valid([]byte(line)) {
						t.Fatalf("%s: the context is not one valid JSON line: %.200q", where, ctxMsg)
					}
					if where == "context" {
						if gjson.Get(line, "request.doc").String() != c.Text {
							t.Fatalf("the attack string did not survive as data (it must be kept, as data)")
						}
					} else {
						// The tool output is its own message, byte for byte; nothing else changed.
						for i := range msgs {
							same := msgs[i].Raw == cleanMsgs[i].Raw
							if (msgs[i].Get("role").String() == "tool") == same {
								t.Fatalf("tool: message %d changed=%v", i, !same)
							}
						}
					}
				}
			})
		}
	}
}
