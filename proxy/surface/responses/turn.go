package responses

import (
	"bytes"
	"errors"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// appendTurn returns body (an upstream request) with the model's turn and the results of its calls
// appended, for asking the upstream again in onViolation "continue". It edits the raw bytes with
// sjson: every other byte stays. With a conversation object, input becomes the results; with the
// turn's response id and storage on, previous_response_id becomes that id and input the results;
// otherwise the turn's output items and the results are appended to input (a string input becomes a
// user message first).
func appendTurn(body []byte, t relay.Turn) ([]byte, error) {
	var results [][]byte
	for _, c := range t.Calls {
		if c.Approval {
			results = append(results, approvalResponse(c))
			continue
		}
		typ := "function_call_output"
		if c.Custom {
			typ = "custom_tool_call_output"
		}
		results = append(results, surface.Object("type", typ, "call_id", c.ID, "output", c.Result))
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
		if body, err = sjson.SetRawBytes(body, "input", []byte("["+string(surface.Object("role", "user", "content", in.Str))+"]")); err != nil {
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
			turn = append(turn, surface.Object("type", "message", "role", "assistant",
				"content", []byte("["+string(surface.Object("type", "output_text", "text", t.Text))+"]")))
		}
		for _, c := range t.Calls {
			if c.Approval {
				continue // an approval request is in Raw, never built
			}
			if c.Custom {
				turn = append(turn, surface.Object("type", "custom_tool_call", "call_id", c.ID, "name", c.Tool, "input", surface.InputString(c.Args)))
			} else {
				turn = append(turn, surface.Object("type", "function_call", "call_id", c.ID, "name", c.Tool, "arguments", string(surface.ArgsOrEmpty(c.Args))))
			}
		}
	}
	return surface.AppendRaw(body, "input", append(turn, results...)...)
}
