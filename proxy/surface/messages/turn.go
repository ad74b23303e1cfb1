package messages

import (
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/proxy/relay"
)

// turnBlocks assembles, in continue mode, the content blocks of a streamed round as the upstream sent them —
// text, thinking with its signature, tool_use and server tool blocks with their input — so that the model's
// turn goes back to it whole when promptgate answers its calls itself (thinking blocks must come back with
// their signatures for the turn to be accepted).
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
