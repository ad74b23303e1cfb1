package messages

import (
	"bytes"
	"errors"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// turnBlocks assembles, in continue mode, the content blocks of a streamed round as the upstream
// sent them — text, thinking with its signature, tool_use and server tool blocks with their input —
// so that the model's turn goes back to it whole when promptgate answers its calls itself (thinking
// blocks must come back with their signatures for the turn to be accepted).
type turnBlocks struct {
	order []int
	byIdx map[int]*turnBlock
}

type turnBlock struct {
	start     []byte // the content_block of its content_block_start
	text      []byte
	thinking  []byte
	signature []byte
	partial   []byte
	citations []string
}

// note reads one event of the round.
func (tb *turnBlocks) note(typ string, data []byte) {
	idx, ok := relay.IntField(relay.Get(data, pathIndex))
	if !ok {
		return
	}
	switch typ {
	case evBlockStart:
		if tb.byIdx == nil {
			tb.byIdx = map[int]*turnBlock{}
		}
		if _, seen := tb.byIdx[idx]; !seen {
			tb.order = append(tb.order, idx)
		}
		tb.byIdx[idx] = &turnBlock{start: []byte(gjson.GetBytes(data, "content_block").Raw)}
	case evBlockDelta:
		b := tb.byIdx[idx]
		if b == nil {
			return
		}
		d := gjson.GetBytes(data, "delta")
		switch d.Get(pathType).String() {
		case "text_delta":
			b.text = append(b.text, d.Get("text").String()...)
		case "thinking_delta":
			b.thinking = append(b.thinking, d.Get("thinking").String()...)
		case "signature_delta":
			b.signature = append(b.signature, d.Get("signature").String()...)
		case deltaInputJSON:
			b.partial = append(b.partial, d.Get("partial_json").String()...)
		case "citations_delta":
			b.citations = append(b.citations, d.Get("citation").Raw)
		}
	}
}

// content is the round's content array.
func (tb *turnBlocks) content() []byte {
	var blocks []string
	for _, idx := range tb.order {
		b := tb.byIdx[idx]
		out := b.start
		if !gjson.ValidBytes(out) || !gjson.ParseBytes(out).IsObject() {
			continue
		}
		set := func(path string, v []byte) {
			if len(v) > 0 {
				out, _ = sjson.SetBytes(out, path, string(v))
			}
		}
		set("text", b.text)
		set("thinking", b.thinking)
		set("signature", b.signature)
		if len(b.partial) > 0 {
			in := b.partial
			if !gjson.ValidBytes(in) || !gjson.ParseBytes(in).IsObject() {
				in = []byte("{}") // a cut-off or broken input: the call was refused, its input is not run
			}
			out, _ = sjson.SetRawBytes(out, pathInput, in)
		}
		if len(b.citations) > 0 {
			out, _ = sjson.SetRawBytes(out, "citations", relay.JoinArray(b.citations))
		}
		blocks = append(blocks, string(out))
	}
	return relay.JoinArray(blocks)
}

// appendTurn returns body (an upstream request) with the model's turn and the results of its calls
// appended, for asking the upstream again in onViolation "continue". It edits the raw bytes with
// sjson: every other byte stays. An assistant message with the turn's content, then a user message
// with one tool_result block per call (is_error true).
func appendTurn(body []byte, t relay.Turn) ([]byte, error) {
	if !gjson.GetBytes(body, "messages").IsArray() {
		return nil, errors.New("messages must be an array")
	}
	content := t.Raw
	if content == nil {
		var b bytes.Buffer
		b.WriteByte('[')
		if t.Text != "" {
			b.Write(surface.Object("type", "text", "text", t.Text))
		}
		for _, c := range t.Calls {
			if b.Len() > 1 {
				b.WriteByte(',')
			}
			b.Write(surface.Object("type", "tool_use", "id", c.ID, "name", c.Tool, "input", surface.ArgsOrEmpty(c.Args)))
		}
		b.WriteByte(']')
		content = b.Bytes()
	}
	var results bytes.Buffer
	results.WriteByte('[')
	for i, c := range t.Calls {
		if i > 0 {
			results.WriteByte(',')
		}
		results.Write(surface.Object("type", "tool_result", "tool_use_id", c.ID, "content", c.Result, "is_error", true))
	}
	results.WriteByte(']')
	return surface.AppendRaw(body, "messages",
		surface.Object("role", "assistant", "content", content),
		surface.Object("role", "user", "content", results.Bytes()))
}
