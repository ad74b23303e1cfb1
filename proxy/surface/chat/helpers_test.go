package chat

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/relay/relaytest"
)

// chunkHead is what OpenAI puts around every streamed choice.
const chunkHead = `{"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_x","choices":[]}`

// chunk builds one chunk JSON with the given choices (raw JSON objects).
func chunk(choices ...string) string {
	out, err := sjson.SetRaw(chunkHead, "choices", "["+strings.Join(choices, ",")+"]")
	if err != nil {
		panic(err)
	}
	return out
}

// choice builds a streamed choice with the given delta (raw JSON) and finish reason ("" = null).
func choice(index int, delta, finish string) string {
	c := `{"index":0,"delta":{},"logprobs":null,"finish_reason":null}`
	c, _ = sjson.Set(c, "index", index)
	c, _ = sjson.SetRaw(c, "delta", delta)
	if finish != "" {
		c, _ = sjson.Set(c, "finish_reason", finish)
	}
	return c
}

func jstr(s string) string { return relaytest.JSONString(s) }

// text is a content delta of choice 0.
func text(s string) string { return chunk(choice(0, `{"content":`+jstr(s)+`}`, "")) }

// role is OpenAI's first chunk.
func role() string { return chunk(choice(0, `{"role":"assistant","content":"","refusal":null}`, "")) }

// tc is one tool_calls entry; id and name are left out when empty.
func tc(index int, id, name, args string) string {
	e := `{"index":0}`
	e, _ = sjson.Set(e, "index", index)
	if id != "" {
		e, _ = sjson.Set(e, "id", id)
		e, _ = sjson.Set(e, "type", "function")
	}
	fn := `{}`
	if name != "" {
		fn, _ = sjson.Set(fn, "name", name)
	}
	fn, _ = sjson.Set(fn, "arguments", args)
	e, _ = sjson.SetRaw(e, "function", fn)
	return e
}

// toolEv is an event with tool_calls entries for one choice.
func toolEv(ch int, entries ...string) string {
	return chunk(choice(ch, `{"tool_calls":[`+strings.Join(entries, ",")+`]}`, ""))
}

// finish is a final chunk of a choice.
func finish(ch int, reason string) string { return chunk(choice(ch, `{}`, reason)) }

// callEvents streams one call the way OpenAI does: id and name first, then the arguments in
// pieces of at most n runes.
func callEvents(ch, index int, id, name, args string, n int) []string {
	first := chunk(choice(ch, `{"role":"assistant","content":null,"tool_calls":[`+tc(index, id, name, "")+`],"refusal":null}`, ""))
	if index > 0 {
		first = toolEv(ch, tc(index, id, name, ""))
	}
	evs := []string{first}
	for _, piece := range splitRunes(args, n) {
		evs = append(evs, toolEv(ch, tc(index, "", "", piece)))
	}
	return evs
}

func splitRunes(s string, n int) []string { return relaytest.SplitRunes(s, n) }

// sseOf frames data values as SSE events.
func sseOf(datas ...string) string {
	var b strings.Builder
	for _, d := range datas {
		b.WriteString("data: " + d + "\n\n")
	}
	return b.String()
}

const done = "[DONE]"

// call is a tool call as a client assembles it.
type call struct {
	Choice int
	ID     string
	Name   string
	Args   string
}

// view is what a client makes of a stream.
type view struct {
	Content map[int]string
	Calls   []call
	Finish  map[int]string
	Error   string // code of an error event
	Done    bool
	After   int // events after an error or [DONE]
}

// assemble reads a stream as the official Go SDK does: calls keyed by (choice, index) alone,
// -1 read as 0, id and type replaced, name and argument fragments concatenated.
func assemble(t testing.TB, out []byte) view {
	t.Helper()
	v := view{Content: map[int]string{}, Finish: map[int]string{}}
	type key struct{ ch, ix int }
	cur := map[key]int{} // -> position in v.Calls
	for ev := range relaytest.Events(t, out) {
		if v.Done || v.Error != "" {
			v.After++
		}
		if bytes.HasPrefix(ev.Data, []byte(done)) {
			v.Done = true
			continue
		}
		if !gjson.ValidBytes(ev.Data) {
			continue
		}
		if e := gjson.GetBytes(ev.Data, "error"); e.Exists() {
			if code := e.Get("code").String(); code == relay.CodeToolCallBlocked || code == relay.CodeTruncated {
				v.Error = code // the stream's own: it ends the stream
			}
			continue
		}
		for _, c := range gjson.GetBytes(ev.Data, "choices").Array() {
			ch := int(c.Get("index").Int())
			v.Content[ch] += c.Get("delta.content").String()
			if f := c.Get("finish_reason"); f.Type == gjson.String {
				v.Finish[ch] = f.Str
			}
			for _, e := range c.Get("delta.tool_calls").Array() {
				ix := int(e.Get("index").Int())
				if ix == -1 {
					ix = 0
				}
				id := e.Get("id").String()
				pos, ok := cur[key{ch, ix}]
				if !ok {
					v.Calls = append(v.Calls, call{Choice: ch})
					pos = len(v.Calls) - 1
					cur[key{ch, ix}] = pos
				}
				if id != "" {
					v.Calls[pos].ID = id
				}
				v.Calls[pos].Name += e.Get("function.name").String()
				v.Calls[pos].Args += e.Get("function.arguments").String()
			}
			if fc := c.Get("delta.function_call"); fc.Exists() && fc.Type != gjson.Null {
				pos, ok := cur[key{ch, -100}]
				if !ok {
					v.Calls = append(v.Calls, call{Choice: ch, ID: "legacy"})
					pos = len(v.Calls) - 1
					cur[key{ch, -100}] = pos
				}
				v.Calls[pos].Name += fc.Get("name").String()
				v.Calls[pos].Args += fc.Get("arguments").String()
			}
		}
	}
	return v
}

// runStream pipes input through a Stream and returns the output, the decisions and the count of
// blocked calls. With split > 0 the upstream returns 1..split bytes per Read.
func runStream(t testing.TB, input string, c *vet.Checker, split int, seed uint64) ([]byte, []vet.Decision, int) {
	t.Helper()
	return relaytest.Run(t, input, split, seed, relaytest.Opener(NewStream, c))
}

// policy is the checker most tests use.
func checkerFor(mode vet.Mode, atomic bool) *vet.Checker { return relaytest.Policy(mode, atomic) }
