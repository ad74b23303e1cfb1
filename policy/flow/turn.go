package flow

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Answered is a call of the model's turn and the result promptgate gives it itself.
type Answered struct {
	// ID is the call's id (Chat tool_calls[].id, Responses call_id, Anthropic tool_use id); "" for
	// a legacy Chat function_call.
	ID   string
	Tool string
	// Args is the call's raw argument JSON text (Anthropic: its input object).
	Args []byte
	// Custom marks a custom tool call (free-form input: Args is its input as a JSON string).
	Custom bool
	// Result is the tool result, such as RefusalText's.
	Result string
}

// Turn is one turn of the model that promptgate answers itself, for AppendTurn.
type Turn struct {
	// Raw is the model's turn as the upstream returned it, sent back as it is: Chat the choice's
	// message object, Responses the response's output array, Messages the content array. nil builds
	// the turn from Text and Calls.
	Raw []byte
	// Text is the model's text in the turn (used when Raw is nil).
	Text string
	// Calls are the turn's calls with their results, in order; every call of the turn must be here
	// (the APIs want a result for each).
	Calls []Answered
	// ResponseID (Responses) is the id of the upstream response that holds the turn: when the
	// request stores responses (store is not false) the continuation refers to it by
	// previous_response_id and sends only the results.
	ResponseID string
}

// AppendTurn returns body (an upstream request of surface s) with the model's turn and the
// results of its calls appended, for asking the upstream again. It edits the raw bytes with sjson:
// every other byte stays. Chat: an assistant message (tool_calls or legacy function_call), then a
// tool (function) message per call. Responses: with a conversation object, input becomes the
// results; with ResponseID and storage on, previous_response_id becomes ResponseID and input the
// results; otherwise the turn's output items and the results are appended to input (a string input
// becomes a user message first). Messages: an assistant message with the turn's content, then a user
// message with one tool_result block per call (is_error true).
func AppendTurn(s Surface, body []byte, t Turn) ([]byte, error) {
	if len(t.Calls) == 0 {
		return nil, errors.New("flow: append turn: no call to answer")
	}
	var out []byte
	var err error
	switch s {
	case SurfaceChat:
		out, err = appendChat(body, t)
	case SurfaceResponses:
		out, err = appendResponses(body, t)
	case SurfaceMessages:
		out, err = appendMessages(body, t)
	default:
		err = fmt.Errorf("unknown surface %q", s)
	}
	if err != nil {
		return nil, fmt.Errorf("flow: append turn: %w", err)
	}
	return out, nil
}

// appendItems appends raw JSON values to the array at path.
func appendItems(body []byte, path string, items ...[]byte) ([]byte, error) {
	var err error
	for _, it := range items {
		if body, err = sjson.SetRawBytes(body, path+".-1", it); err != nil {
			return nil, err
		}
	}
	return body, nil
}

// obj writes a JSON object from key, raw value pairs.
func obj(kv ...any) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(&b, kv[i].(string))
		b.WriteByte(':')
		switch v := kv[i+1].(type) {
		case string:
			writeString(&b, v)
		case []byte:
			b.Write(v)
		case bool:
			b.WriteString(fmt.Sprint(v))
		}
	}
	b.WriteByte('}')
	return b.Bytes()
}

// str is a JSON string.
func str(s string) []byte {
	var b bytes.Buffer
	writeString(&b, s)
	return b.Bytes()
}

// argsOrEmpty is a call's argument JSON, "{}" when it has none.
func argsOrEmpty(a []byte) []byte {
	if len(bytes.TrimSpace(a)) == 0 {
		return []byte("{}")
	}
	return a
}

func appendChat(body []byte, t Turn) ([]byte, error) {
	if !gjson.GetBytes(body, "messages").IsArray() {
		return nil, errors.New("messages must be an array")
	}
	msg := t.Raw
	if msg == nil {
		content := []byte("null")
		if t.Text != "" {
			content = str(t.Text)
		}
		var calls bytes.Buffer
		var legacy []byte
		for _, c := range t.Calls {
			switch {
			case c.ID == "":
				legacy = obj("name", c.Tool, "arguments", string(argsOrEmpty(c.Args)))
			case c.Custom:
				if calls.Len() > 0 {
					calls.WriteByte(',')
				}
				calls.Write(obj("id", c.ID, "type", "custom", "custom", obj("name", c.Tool, "input", inputString(c.Args))))
			default:
				if calls.Len() > 0 {
					calls.WriteByte(',')
				}
				calls.Write(obj("id", c.ID, "type", "function", "function", obj("name", c.Tool, "arguments", string(argsOrEmpty(c.Args)))))
			}
		}
		kv := []any{"role", "assistant", "content", content}
		if calls.Len() > 0 {
			kv = append(kv, "tool_calls", []byte("["+calls.String()+"]"))
		}
		if legacy != nil {
			kv = append(kv, "function_call", legacy)
		}
		msg = obj(kv...)
	}
	items := [][]byte{msg}
	for _, c := range t.Calls {
		if c.ID == "" {
			items = append(items, obj("role", "function", "name", c.Tool, "content", c.Result))
		} else {
			items = append(items, obj("role", "tool", "tool_call_id", c.ID, "content", c.Result))
		}
	}
	return appendItems(body, "messages", items...)
}

// inputString is a custom tool's input as a Go string (Args holds it as a JSON string).
func inputString(a []byte) string {
	if v := gjson.ParseBytes(a); v.Type == gjson.String {
		return v.Str
	}
	return string(a)
}

func appendResponses(body []byte, t Turn) ([]byte, error) {
	var results [][]byte
	for _, c := range t.Calls {
		typ := "function_call_output"
		if c.Custom {
			typ = "custom_tool_call_output"
		}
		results = append(results, obj("type", typ, "call_id", c.ID, "output", c.Result))
	}
	conv := gjson.GetBytes(body, "conversation")
	stored := gjson.GetBytes(body, "store").Type != gjson.False
	var err error
	switch {
	case conv.Exists() && conv.Type != gjson.Null, t.ResponseID != "" && stored:
		if t.ResponseID != "" && !(conv.Exists() && conv.Type != gjson.Null) {
			if body, err = sjson.SetBytes(body, "previous_response_id", t.ResponseID); err != nil {
				return nil, err
			}
		}
		return sjson.SetRawBytes(body, "input", []byte("["+string(bytes.Join(results, []byte(",")))+"]"))
	}
	switch in := gjson.GetBytes(body, "input"); {
	case in.Type == gjson.String:
		if body, err = sjson.SetRawBytes(body, "input", []byte("["+string(obj("role", "user", "content", in.Str))+"]")); err != nil {
			return nil, err
		}
	case !in.Exists() || in.Type == gjson.Null:
		if body, err = sjson.SetRawBytes(body, "input", []byte("[]")); err != nil {
			return nil, err
		}
	case !in.IsArray():
		return nil, errors.New("input must be a string or an array")
	}
	var turn [][]byte
	if t.Raw != nil {
		raw := gjson.ParseBytes(t.Raw)
		if !raw.IsArray() {
			return nil, errors.New("a Responses turn must be the output array")
		}
		raw.ForEach(func(_, it gjson.Result) bool {
			turn = append(turn, []byte(it.Raw))
			return true
		})
	} else {
		if t.Text != "" {
			turn = append(turn, obj("type", "message", "role", "assistant",
				"content", []byte("["+string(obj("type", "output_text", "text", t.Text))+"]")))
		}
		for _, c := range t.Calls {
			if c.Custom {
				turn = append(turn, obj("type", "custom_tool_call", "call_id", c.ID, "name", c.Tool, "input", inputString(c.Args)))
			} else {
				turn = append(turn, obj("type", "function_call", "call_id", c.ID, "name", c.Tool, "arguments", string(argsOrEmpty(c.Args))))
			}
		}
	}
	return appendItems(body, "input", append(turn, results...)...)
}

func appendMessages(body []byte, t Turn) ([]byte, error) {
	if !gjson.GetBytes(body, "messages").IsArray() {
		return nil, errors.New("messages must be an array")
	}
	content := t.Raw
	if content == nil {
		var b bytes.Buffer
		b.WriteByte('[')
		if t.Text != "" {
			b.Write(obj("type", "text", "text", t.Text))
		}
		for _, c := range t.Calls {
			if b.Len() > 1 {
				b.WriteByte(',')
			}
			b.Write(obj("type", "tool_use", "id", c.ID, "name", c.Tool, "input", argsOrEmpty(c.Args)))
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
		results.Write(obj("type", "tool_result", "tool_use_id", c.ID, "content", c.Result, "is_error", true))
	}
	results.WriteByte(']')
	return appendItems(body, "messages",
		obj("role", "assistant", "content", content),
		obj("role", "user", "content", results.Bytes()))
}
