package gemini

import (
	"bytes"
	"errors"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// appendTurn returns body (an upstream request) with the model's turn and the results of its calls
// appended, for asking the upstream again in onViolation "continue". It edits the raw bytes with
// sjson: every other byte stays. A model content with the turn's parts as the upstream sent them
// (thought signatures included, which Gemini wants back), then a user content with one
// functionResponse part per call, in the calls' order, named as the call and with its id where it
// had one, the refusal as its response's error.
func appendTurn(body []byte, t relay.Turn) ([]byte, error) {
	root := gjson.ParseBytes(body)
	contents, ok := get(root, fContents)
	if !ok || !contents.IsArray() {
		return nil, errors.New("contents must be an array")
	}
	parts := t.Raw
	if parts == nil {
		var b bytes.Buffer
		b.WriteByte('[')
		if t.Text != "" {
			b.Write(textPart(t.Text))
		}
		for _, c := range t.Calls {
			if b.Len() > 1 {
				b.WriteByte(',')
			}
			b.Write(surface.Object("functionCall", callObject(c.Tool, c.ID, "args", surface.ArgsOrEmpty(c.Args))))
		}
		b.WriteByte(']')
		parts = b.Bytes()
	}
	var results bytes.Buffer
	results.WriteByte('[')
	for i, c := range t.Calls {
		if i > 0 {
			results.WriteByte(',')
		}
		results.Write(surface.Object("functionResponse", callObject(c.Tool, c.ID, "response", surface.Object("error", c.Result))))
	}
	results.WriteByte(']')
	return surface.AppendRaw(body, key(root, fContents),
		surface.Object("role", "model", "parts", parts),
		surface.Object("role", "user", "parts", results.Bytes()))
}

// callObject is a functionCall or functionResponse object: its name, its id when it has one, and
// its value under k.
func callObject(name, id, k string, v []byte) []byte {
	if id == "" {
		return surface.Object("name", name, k, v)
	}
	return surface.Object("id", id, "name", name, k, v)
}
