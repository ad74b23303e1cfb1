package proxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"golang.org/x/text/unicode/norm"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/policy/modules"
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

// startFileMemory builds the example plugin filememory with the go command and starts it, named
// "memory", serving the users' files in dir.
func startFileMemory(t *testing.T, dir string) *plugins.Host {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the corpus test builds the filememory plugin and needs the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "filememory")
	if out, err := exec.Command(goTool, "build", "-o", bin, "../plugins/examples/filememory").CombinedOutput(); err != nil {
		t.Fatalf("go build filememory: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	spec := plugins.Spec{Name: "memory", Path: bin, SHA256: hex.EncodeToString(sum[:]), Module: "memory", MinMode: modules.Minimal,
		Timeout: 10 * time.Second, Required: true, Config: map[string]any{"dir": dir}}
	h, err := plugins.NewHost(context.Background(), []plugins.Spec{spec}, plugins.HostOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// corpusSurface is one rewritten API as the corpus test sees it.
type corpusSurface struct {
	path    string
	prepare func(*Engine, context.Context, Input) (*Prepared, error)
	// body is a banking conversation with one tool round, the tool output and the request's context
	// given.
	body func(contextDoc, toolOutput, user string) []byte
	// items lists the conversation after the rewrite (messages / input items), without the prompt.
	items string
	// toolPath is the path of the tool output inside items, toolIndex the item that holds it.
	toolIndex int
	toolPath  string
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

var corpusSurfaces = []corpusSurface{
	{PathChat, (*Engine).Prepare, func(doc, tool, user string) []byte {
		return []byte(`{"model":"m","messages":[{"role":"system","content":"You help with banking."},{"role":"user","content":"check my balance"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_page","arguments":"{}"}}]},` +
			`{"role":"tool","tool_call_id":"call_1","content":` + jsonOf(tool) + `},{"role":"user","content":"and?"}],` +
			`"tools":[{"type":"function","function":{"name":"read_page","description":"Read a page."}},{"type":"function","function":{"name":"send_money","description":"Send money."}}],` +
			`"promptgate":{"user":` + jsonOf(user) + `,"context":{"doc":` + jsonOf(doc) + `}}}`)
	}, "messages", 2, "content"},
	{PathResponses, (*Engine).Prepare, func(doc, tool, user string) []byte {
		return []byte(`{"model":"m","instructions":"You help with banking.","input":[{"role":"user","content":"check my balance"},` +
			`{"type":"function_call","call_id":"call_1","name":"read_page","arguments":"{}"},` +
			`{"type":"function_call_output","call_id":"call_1","output":` + jsonOf(tool) + `},{"role":"user","content":"and?"}],` +
			`"tools":[{"type":"function","name":"read_page","description":"Read a page."},{"type":"function","name":"send_money","description":"Send money."}],` +
			`"promptgate":{"user":` + jsonOf(user) + `,"context":{"doc":` + jsonOf(doc) + `}}}`)
	}, "input", 2, "output"},
	{PathMessages, (*Engine).Prepare, func(doc, tool, user string) []byte {
		return []byte(`{"model":"m","max_tokens":100,"system":"You help with banking.","messages":[{"role":"user","content":"check my balance"},` +
			`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"read_page","input":{}}]},` +
			`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":` + jsonOf(tool) + `},{"type":"text","text":"and?"}]}],` +
			`"tools":[{"name":"read_page","description":"Read a page.","input_schema":{"type":"object"}},{"name":"send_money","description":"Send money.","input_schema":{"type":"object"}}],` +
			`"promptgate":{"user":` + jsonOf(user) + `,"context":{"doc":` + jsonOf(doc) + `}}}`)
	}, "messages", 2, "content.0.content"},
}

// corpusRender is what the test compares of one upstream body.
type corpusRender struct {
	system  string // the layered system text
	ctxMsg  string // the context header and JSON line, wherever they went
	items   []gjson.Result
	tools   string
	trusted string // the system text with the context JSON line cut out
}

func renderOf(t *testing.T, sf corpusSurface, e *Engine, body []byte) corpusRender {
	t.Helper()
	p, err := sf.prepare(e, context.Background(), Input{Path: sf.path, Header: http.Header{}, Body: body})
	if err != nil {
		t.Fatalf("%s: %v", sf.path, err)
	}
	out := p.Body
	if !json.Valid(out) {
		t.Fatalf("%s: invalid upstream body %s", sf.path, out)
	}
	r := corpusRender{system: systemOf(sf.path, out), items: gjson.GetBytes(out, sf.items).Array(), tools: gjson.GetBytes(out, "tools").Raw}
	if sf.path == PathChat {
		r.items = r.items[1:] // the layered system message
		if p.Prompt.ContextMessage != "" {
			r.ctxMsg = r.items[0].Get("content").String()
			r.items = r.items[1:]
		}
	}
	if sf.path == PathMessages && p.Prompt.ContextMessage != "" {
		r.ctxMsg = gjson.GetBytes(out, "system.1.text").String()
	}
	r.trusted = r.system
	if r.ctxMsg == "" {
		i := strings.Index(r.system, "\n"+assembly.ContextHeader+"\n")
		if i < 0 {
			t.Fatalf("%s: no context block in %.200q", sf.path, r.system)
		}
		start := i + len(assembly.ContextHeader) + 2
		line, _, _ := strings.Cut(r.system[start:], "\n")
		r.ctxMsg = assembly.ContextHeader + "\n" + line
		r.trusted = r.system[:start] + r.system[start+len(line):]
	}
	return r
}

// TestInjectionCorpus sends every published attack string as the request's runtime context, as a
// plugin's answer (the real filememory plugin, serving DIR/<user>.json) and as a tool output, on
// the chat, Responses and Messages surfaces, with the context in the prompt and in its own message,
// with and without datamarking. Each time the trusted text is byte-identical to a clean render, the
// attack stays inside the one JSON line (or its own tool message), survives there as data, no line
// of the system text reads as an extra header, and neither the conversation's items, count and
// roles, nor the tool set change.
func TestInjectionCorpus(t *testing.T) {
	corpus := loadCorpus(t)
	dir := t.TempDir()
	for i, c := range corpus {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("u%d.json", i)), []byte(jsonOf(map[string]string{"doc": c.Text})), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "clean.json"), []byte(`{"doc":"clean data"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	host := startFileMemory(t, dir)
	for _, variant := range []struct {
		name     string
		env      map[string]string
		datamark bool
	}{
		{"inline", nil, false},
		{"structured", map[string]string{"PROMPT_STRUCTURED_RUNTIME_CONTEXT_CHANNEL": "system_message"}, false},
		{"datamark", nil, true},
	} {
		e := testEngine(t, "", variant.env, nil, nil)
		e.context = host
		e.settings.DatamarkToolOutput = variant.datamark
		for _, sf := range corpusSurfaces {
			clean := renderOf(t, sf, e, sf.body("clean data", "clean output", "clean"))
			if !strings.Contains(clean.ctxMsg, `"memory":{"doc":"clean data"}`) {
				t.Fatalf("%s: the plugin's answer is not in the clean context: %s", sf.path, clean.ctxMsg)
			}
			if got := strings.Contains(clean.system, assembly.DatamarkRule); got != variant.datamark {
				t.Fatalf("%s %s: datamark rule in the prompt = %v", variant.name, sf.path, got)
			}
			for i, c := range corpus {
				user := fmt.Sprintf("u%d", i)
				for _, where := range []string{"context", "plugin", "tool"} {
					doc, tool, u := "clean data", "clean output", "clean"
					switch where {
					case "context":
						doc = c.Text
					case "plugin":
						u = user
					case "tool":
						tool = c.Text
					}
					got := renderOf(t, sf, e, sf.body(doc, tool, u))
					fail := func(format string, args ...any) {
						t.Helper()
						t.Fatalf("%s %s %s as %s: %s", variant.name, sf.path, c.ID, where, fmt.Sprintf(format, args...))
					}
					if got.trusted != clean.trusted {
						fail("the trusted text changed:\n got %.400q\nwant %.400q", got.trusted, clean.trusted)
					}
					if got.tools != clean.tools {
						fail("the tool set changed: %s", got.tools)
					}
					if len(got.items) != len(clean.items) {
						fail("%d items, the clean render has %d", len(got.items), len(clean.items))
					}
					for k := range got.items {
						if got.items[k].Get("role").String() != clean.items[k].Get("role").String() || got.items[k].Get("type").String() != clean.items[k].Get("type").String() {
							fail("item %d changed role or type: %s", k, got.items[k].Raw)
						}
						if k != sf.toolIndex && got.items[k].Raw != clean.items[k].Raw {
							fail("item %d changed: %s", k, got.items[k].Raw)
						}
					}
					header, line, ok := strings.Cut(got.ctxMsg, "\n")
					if !ok || header != assembly.ContextHeader || strings.ContainsAny(line, "\n\r\v\f\x1c\x1d\x1e\u0085\u2028\u2029") || !json.Valid([]byte(line)) {
						fail("the context is not one valid JSON line: %.300q", got.ctxMsg)
					}
					for _, l := range strings.Split(got.system, "\n") {
						if readsAsHeader(l) && !strings.HasPrefix(l, "=== ") {
							fail("a line reads as a header: %q", l)
						}
					}
					toolOut := got.items[sf.toolIndex].Get(sf.toolPath).String()
					switch where {
					case "context":
						if gjson.Get(line, "request.doc").String() != c.Text {
							fail("the attack string did not survive as data (it must be kept, as data)")
						}
					case "plugin":
						if gjson.Get(line, "memory.doc").String() != c.Text {
							fail("the plugin's answer did not survive as data: %.300q", line)
						}
					case "tool":
						want := c.Text
						if variant.datamark {
							want = assembly.Datamark(c.Text)
						}
						if toolOut != want {
							fail("tool output %.200q, want %.200q", toolOut, want)
						}
					}
					if where != "tool" && got.items[sf.toolIndex].Raw != clean.items[sf.toolIndex].Raw {
						fail("the tool item changed")
					}
				}
			}
		}
	}
}

// systemOf returns the layered system text of an upstream body, by surface.
func systemOf(path string, body []byte) string {
	switch path {
	case PathResponses:
		return gjson.GetBytes(body, "instructions").String()
	case PathMessages:
		if sys := gjson.GetBytes(body, "system"); sys.IsArray() {
			return sys.Get("0.text").String()
		}
		return gjson.GetBytes(body, "system").String()
	}
	return gjson.GetBytes(body, "messages.0.content").String()
}

// readsAsHeader is the test's own idea, independent of assembly's code, of a line a model could
// read as a section header: after NFKC folding of the whole line and blanks, invisible characters
// and marks, it starts with "=" or a look-alike.
func readsAsHeader(line string) bool {
	rest := strings.TrimLeftFunc(norm.NFKC.String(line), func(r rune) bool {
		return unicode.IsSpace(r) || unicode.In(r, unicode.Cf, unicode.Mn, unicode.Me, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point) ||
			r == '\u115f' || r == '\u1160' || r == '\u3164' || r == '\uffa0' || r == '\u2800'
	})
	r, _ := utf8.DecodeRuneInString(rest)
	return rest != "" && strings.ContainsRune("=═≡≣⊜⚌⹀゠᐀꓿꞊〓‗𐆐🟰", r)
}
