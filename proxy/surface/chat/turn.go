package chat

import (
	"bytes"
	"errors"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// appendTurn returns body (an upstream request) with the model's turn and the results of its calls
// appended, for asking the upstream again in onViolation "continue". It edits the raw bytes with
// sjson: every other byte stays. An assistant message (tool_calls or legacy function_call), then a
// tool (or function) message per call.
func appendTurn(body []byte, t relay.Turn) ([]byte, error) {
	if !gjson.GetBytes(body, "messages").IsArray() {
		return nil, errors.New("messages must be an array")
	}
	msg := t.Raw
	if msg == nil {
		content := []byte("null")
		if t.Text != "" {
			content = assembly.JSONString(t.Text)
		}
		var calls bytes.Buffer
		var legacy []byte
		for _, c := range t.Calls {
			switch {
			case c.ID == "":
				legacy = surface.Object("name", c.Tool, "arguments", string(surface.ArgsOrEmpty(c.Args)))
			case c.Custom:
				if calls.Len() > 0 {
					calls.WriteByte(',')
				}
				calls.Write(surface.Object("id", c.ID, "type", "custom", "custom", surface.Object("name", c.Tool, "input", surface.InputString(c.Args))))
			default:
				if calls.Len() > 0 {
					calls.WriteByte(',')
				}
				calls.Write(surface.Object("id", c.ID, "type", "function", "function", surface.Object("name", c.Tool, "arguments", string(surface.ArgsOrEmpty(c.Args)))))
			}
		}
		kv := []any{"role", "assistant", "content", content}
		if calls.Len() > 0 {
			kv = append(kv, "tool_calls", []byte("["+calls.String()+"]"))
		}
		if legacy != nil {
			kv = append(kv, "function_call", legacy)
		}
		msg = surface.Object(kv...)
	}
	items := [][]byte{msg}
	for _, c := range t.Calls {
		if c.ID == "" {
			items = append(items, surface.Object("role", "function", "name", c.Tool, "content", c.Result))
		} else {
			items = append(items, surface.Object("role", "tool", "tool_call_id", c.ID, "content", c.Result))
		}
	}
	return surface.AppendRaw(body, "messages", items...)
}
