// Package chat is the Chat Completions surface (POST /v1/chat/completions): how its request is
// read, its tool_choice checked and the layered prompt and kept tools written back (request.go),
// and how the tool calls of its answers are vetted before the client sees them — the non-stream
// body (Body) and the SSE stream (Stream), every choice, both tool_calls and the legacy
// function_call. Text keeps flowing in a stream; only a tool call's own deltas are held until the
// call is complete and vetted, then released unchanged or replaced by a notice.
//
// It owns the Chat Completions wire shapes, edited with gjson/sjson on the raw bytes, never a
// re-marshal. It does not build the prompt (assembly does), decide whether a call is allowed
// (policy/vet does), pick the mode or the allowed set (policy/ does) or store decisions (the
// caller's Recorder does); in error mode Body reports the blocked call and the proxy answers 403.
package chat

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
)

// Paths into a response, relative to a choice.
const (
	pathChoices      = "choices"
	pathMessage      = "message"
	pathDelta        = "delta"
	pathToolCalls    = "tool_calls"
	pathFunctionCall = "function_call"
	pathContent      = "content"
	pathFinish       = "finish_reason"
	pathIndex        = "index"
	pathID           = "id"
	pathType         = "type"
	pathFnName       = "function.name"
	pathFnArgs       = "function.arguments"
	pathName         = "name"
	pathArgs         = "arguments"

	finishToolCalls    = "tool_calls"
	finishFunctionCall = "function_call"
	finishStop         = "stop"
)

// Body vets a non-stream response body (raw bytes) and returns it, edited with sjson where needed.
//
// refuse: bad calls are removed from message.tool_calls (or message.function_call). Where no call
// is left in a choice, tool_calls is removed, the content becomes the notices (one line per
// blocked call, after the existing text and a line break if there was text) and finish_reason
// "tool_calls"/"function_call" becomes "stop"; where a good call is left, finish_reason stays, and
// only the notices of calls held for confirmation are added to the content.
// error: the body is returned unchanged and Result.ErrorCall is set. audit: the body is returned
// unchanged; violations are recorded as audited.
//
// A body that is not one valid JSON object with unique keys is an error: the client and this
// package could read it differently.
func Body(body []byte, c *vet.Checker, rec relay.Recorder) ([]byte, relay.Result, error) {
	var res relay.Result
	if err := jsoncheck.Object(body, jsoncheck.Limits{MaxDepth: maxEventDepth}); err != nil {
		return body, res, fmt.Errorf("chat: response body: %w", err)
	}
	if !mayCall(body) {
		return body, res, nil // no key can be tool_calls or function_call, in any case: nothing to vet
	}
	if relay.FoldedKey(body, chatKeys) {
		return body, res, fmt.Errorf("chat: response body: a key differs from a known one in case only")
	}
	choices := gjson.GetBytes(body, pathChoices)
	if !choices.IsArray() {
		return body, res, nil
	}
	out := body
	for pos, ch := range choices.Array() {
		idx, ok := relay.IntField(ch.Get(pathIndex))
		if !ok {
			idx = pos
		}
		if carriesCall(ch.Get(pathDelta)) {
			// The stream shape inside a body: a lenient client might take its calls; Body reads
			// message only.
			return body, res, fmt.Errorf("chat: response body: choice %d carries a call in delta", pos)
		}
		msg := ch.Get(pathMessage)
		tcs := msg.Get(pathToolCalls)
		fc := msg.Get(pathFunctionCall)
		var calls []*vet.Call
		var raws []string
		switch {
		case tcs.IsArray():
			for j, tc := range tcs.Array() {
				calls = append(calls, bodyCall(idx, j, tc))
				raws = append(raws, tc.Raw)
			}
		case tcs.Exists() && tcs.Type != gjson.Null:
			call := &vet.Call{Choice: idx}
			call.Fail(vet.ReasonUnsupportedType)
			calls = append(calls, call)
			raws = append(raws, "")
		}
		nTools := len(calls)
		if fc.Exists() && fc.Type != gjson.Null {
			call := &vet.Call{Choice: idx, Index: -1, Legacy: true}
			fillFunction(call, fc)
			calls = append(calls, call)
		}
		if len(calls) == 0 {
			continue
		}
		ds := res.Vet(c, rec, calls)
		if res.ErrorCall != nil {
			// The caller answers with an error; the rest of the body does not matter.
			return body, res, nil
		}
		if len(choices.Array()) == 1 {
			res.Continue = continuation(c, msg, calls, ds)
		}
		var kept []string
		keptLegacy := false
		var notices, held []string
		for i, d := range ds {
			switch {
			case d.Blocked():
				notices = append(notices, vet.Notice(d))
				if d.Verdict == vet.VerdictHeld {
					held = append(held, vet.Notice(d))
				}
			case i < nTools:
				kept = append(kept, raws[i])
			default:
				keptLegacy = true
			}
		}
		if len(notices) == 0 {
			continue
		}
		base := pathChoices + "." + strconv.Itoa(pos) + "."
		var err error
		if len(kept) < nTools {
			if len(kept) > 0 {
				out, err = sjson.SetRawBytes(out, base+pathMessage+"."+pathToolCalls, relay.JoinArray(kept))
			} else {
				out, err = sjson.DeleteBytes(out, base+pathMessage+"."+pathToolCalls)
			}
			if err != nil {
				return body, res, fmt.Errorf("chat: edit choice %d: %w", pos, err)
			}
		}
		if fc.Exists() && fc.Type != gjson.Null && !keptLegacy {
			if out, err = sjson.DeleteBytes(out, base+pathMessage+"."+pathFunctionCall); err != nil {
				return body, res, fmt.Errorf("chat: edit choice %d: %w", pos, err)
			}
		}
		if len(kept) > 0 || keptLegacy {
			// A held call's notice goes to the client in any case: it carries the code that
			// releases the call.
			if len(held) > 0 {
				if out, err = setNotice(out, base, msg.Get(pathContent), held); err != nil {
					return body, res, fmt.Errorf("chat: edit choice %d: %w", pos, err)
				}
			}
			continue
		}
		if out, err = setNotice(out, base, msg.Get(pathContent), notices); err != nil {
			return body, res, fmt.Errorf("chat: edit choice %d: %w", pos, err)
		}
		if f := ch.Get(pathFinish).String(); f == finishToolCalls || f == finishFunctionCall {
			if out, err = sjson.SetBytes(out, base+pathFinish, finishStop); err != nil {
				return body, res, fmt.Errorf("chat: edit choice %d: %w", pos, err)
			}
		}
	}
	return out, res, nil
}

// continuation is the answer's one turn for promptgate to answer itself (onViolation "continue"),
// when every call of it was blocked or held and can be answered; nil otherwise. What the client
// keeps of it is its text, and the notices of its held calls (which carry the codes).
func continuation(c *vet.Checker, msg gjson.Result, calls []*vet.Call, ds []vet.Decision) *relay.Continuation {
	t := relay.Turn{}
	var held []string
	for i, call := range calls {
		if !relay.Answerable(c, call, ds[i]) {
			return nil
		}
		a := relay.Answer(call, ds[i], false)
		t.Calls = append(t.Calls, a)
		if a.Notice != "" {
			held = append(held, a.Notice)
		}
	}
	content := msg.Get(pathContent)
	if content.Type == gjson.String {
		t.Text = content.Str
	}
	kept := []byte(content.Raw)
	if !content.Exists() {
		kept = []byte("null")
	}
	if len(held) > 0 {
		text := strings.Join(held, "\n")
		if t.Text != "" {
			text = t.Text + "\n" + text
		}
		kept = assembly.JSONString(text + "\n")
	}
	return &relay.Continuation{Turn: t, Kept: kept}
}

// bodyCall reads one entry of message.tool_calls.
func bodyCall(choice, index int, tc gjson.Result) *vet.Call {
	call := &vet.Call{Choice: choice, Index: index}
	if id := tc.Get(pathID); id.Type == gjson.String {
		call.ID = id.Str
	}
	if unsupported(tc) {
		call.Fail(vet.ReasonUnsupportedType)
	}
	fillFunction(call, tc.Get("function"))
	return call
}

// unsupported reports whether a tool_calls entry is not a plain function call: its type is another
// than "function", or it carries a custom tool's "custom" member (a client going by the member, not
// the type, would read a custom call that the function beside it hides).
func unsupported(e gjson.Result) bool {
	return unsupportedType(e.Get(pathType), e.Get("custom"))
}

// unsupportedType is unsupported on a call's type and custom values.
func unsupportedType(t, c gjson.Result) bool {
	if t.Exists() && t.Type != gjson.Null && (t.Type != gjson.String || (t.Str != "function" && t.Str != "")) {
		return true
	}
	return c.Exists() && c.Type != gjson.Null
}

// fillFunction reads {"name":...,"arguments":...} into call.
func fillFunction(call *vet.Call, fn gjson.Result) {
	if name := fn.Get(pathName); name.Type == gjson.String {
		call.AddName(strings.Clone(name.Str)) // a stream's event data is the reader's buffer
	}
	switch args := fn.Get(pathArgs); {
	case args.Type == gjson.String:
		call.AppendArgs(args.Str)
	case args.Exists():
		call.Fail(vet.ReasonNotString)
	}
}

// setNotice puts the notices into the message content of the choice at base.
func setNotice(out []byte, base string, content gjson.Result, notices []string) ([]byte, error) {
	text := []byte(nil)
	for i, n := range notices {
		if i > 0 {
			text = append(text, '\n')
		}
		text = append(text, n...)
	}
	path := base + pathMessage + "." + pathContent
	switch {
	case content.Type == gjson.String && content.Str != "":
		return sjson.SetBytes(out, path, content.Str+"\n"+string(text))
	case content.IsArray():
		part, _ := sjson.SetBytes([]byte(`{"type":"text","text":""}`), "text", string(text))
		return sjson.SetRawBytes(out, path+".-1", part)
	default:
		return sjson.SetBytes(out, path, string(text))
	}
}
