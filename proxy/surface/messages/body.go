// Package messages is the Anthropic Messages surface (POST /v1/messages; every /v1/messages/...
// path goes to the Anthropic upstream): how its request is read, its tool_choice checked and the
// layered prompt and kept tools written back (request.go), and how the tool calls of its answers
// are vetted before the client sees them — the non-stream body (Body) and the SSE stream (Stream).
// The calls it vets are the content blocks of type tool_use: client tools, including
// Anthropic-defined client tools such as bash or the text editor. Server tool blocks
// (server_tool_use, web_search_tool_result, mcp_tool_use, ...) are passed on: the upstream ran them
// already, and those tools are governed on the request side.
//
// It owns the Messages wire shapes, edited with gjson/sjson on the raw bytes, never a re-marshal.
// It does not build the prompt (assembly does), decide whether a call is allowed (policy/vet does),
// pick the mode or the allowed set (policy/ does) or store decisions (the caller's Recorder does);
// in error mode Body reports the blocked call and the proxy answers 403.
package messages

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
)

// Reasons of this package, next to policy/vet's. They hold no argument bytes.
const (
	// ReasonIncomplete: the message ended (or another block started at the call's index) before the
	// call's content_block_stop.
	ReasonIncomplete = "call ended before it was complete"
	// ReasonAmbiguousInput: a streamed tool_use block started with a non-empty input and then
	// received input_json_delta fragments; clients differ on whether those replace or extend it.
	ReasonAmbiguousInput = "input given both at the start and in fragments"
)

// Paths and values of the Messages wire format.
const (
	pathContent    = "content"
	pathStopReason = "stop_reason"
	pathType       = "type"
	pathID         = "id"
	pathName       = "name"
	pathInput      = "input"
	typeToolUse    = "tool_use"
	stopToolUse    = "tool_use"
	stopEndTurn    = "end_turn"
	// maxDepth caps the nesting of response JSON (bodies and stream events).
	maxDepth = 128
)

// Body vets a non-stream Messages body (raw bytes) and returns it, edited with sjson where needed.
//
// refuse: blocked tool_use blocks are removed from content; where no tool_use block is left, a text
// block with the notices (`[promptgate] blocked tool call NAME: REASON`, one line each) is appended
// and stop_reason "tool_use" becomes "end_turn"; where one is left, a text block with its notice
// takes the place of a call held for confirmation. error: the body is returned unchanged and
// Result.ErrorCall is set. audit: unchanged; violations recorded as audited. A body that is not one
// valid JSON object with unique keys is an error.
func Body(body []byte, c *vet.Checker, rec relay.Recorder) ([]byte, relay.Result, error) {
	if err := jsoncheck.Object(body, jsoncheck.Limits{MaxDepth: maxDepth}); err != nil {
		return body, relay.Result{}, fmt.Errorf("messages: response body: %w", err)
	}
	if relay.FoldedKeyOutside(body, anthKeys, pathInput) {
		return body, relay.Result{}, fmt.Errorf("messages: response body: a key differs from a known one in case only")
	}
	out, res, _, err := vetMessage(body, c, rec)
	return out, res, err
}

// anthKeys are the keys of a Messages answer that a client reads a tool_use block from. A key that
// differs from one of them in case alone (outside a tool's input) makes an event or a body
// malformed: Go's encoding/json, on which community clients are built, matches keys without regard
// to case (see relay.FoldedKey).
var anthKeys = []string{pathType, pathIndex, "content_block", "delta", pathID, pathName, pathInput, "partial_json",
	"message", pathContent, "stop_reason"}

// vetMessage vets the tool_use blocks of a message object (a response body, or message_start's
// message). It returns the edited message, and the number of content blocks and whether a tool_use
// block is left in it.
func vetMessage(msg []byte, c *vet.Checker, rec relay.Recorder) ([]byte, relay.Result, keptInfo, error) {
	var res relay.Result
	content := gjson.GetBytes(msg, pathContent)
	if !content.IsArray() {
		return msg, res, keptInfo{}, nil
	}
	blocks := content.Array()
	info := keptInfo{blocks: len(blocks)}
	var calls []*vet.Call
	var at []int
	for i, b := range blocks {
		bt := b.Get(pathType).String()
		if bt != typeToolUse && !strings.EqualFold(bt, typeToolUse) {
			continue
		}
		call := &vet.Call{Index: i}
		if bt != typeToolUse {
			// A case variant: a client that reads enums without regard to case runs it, one that
			// reads exactly does not; it is blocked.
			call.Fail(vet.ReasonUnsupportedType)
		}
		if id := b.Get(pathID); id.Type == gjson.String {
			call.ID = id.Str
		}
		if name := b.Get(pathName); name.Type == gjson.String {
			call.AddName(name.Str)
		}
		if in := b.Get(pathInput); in.Exists() {
			call.Args = []byte(in.Raw)
		}
		calls = append(calls, call)
		at = append(at, i)
	}
	if len(calls) == 0 {
		return msg, res, info, nil
	}
	drop := map[int]bool{}
	held := map[int]string{} // block index -> the notice of a call held for confirmation
	var notices []string
	ds := res.Vet(c, rec, calls)
	for i, d := range ds {
		if d.Blocked() {
			drop[at[i]] = true
			notices = append(notices, vet.Notice(d))
			if d.Verdict == vet.VerdictHeld {
				held[at[i]] = vet.Notice(d)
			}
		}
	}
	info.toolUse = len(drop) < len(calls)
	if res.ErrorCall != nil || len(drop) == 0 {
		return msg, res, info, nil
	}
	res.Continue = continuation(c, content, blocks, calls, ds, drop)
	kept := make([]string, 0, len(blocks))
	for i, b := range blocks {
		switch {
		case !drop[i]:
			kept = append(kept, b.Raw)
		case info.toolUse && held[i] != "":
			// A held call's notice takes its place in any case: it carries the code that releases
			// the call.
			kept = append(kept, string(textBlock(held[i])))
		}
	}
	out := msg
	var err error
	if !info.toolUse {
		kept = append(kept, string(textBlock(strings.Join(notices, "\n"))))
		if gjson.GetBytes(out, pathStopReason).String() == stopToolUse {
			if out, err = sjson.SetBytes(out, pathStopReason, stopEndTurn); err != nil {
				return msg, res, info, fmt.Errorf("messages: edit stop_reason: %w", err)
			}
		}
	}
	info.blocks = len(kept)
	if out, err = sjson.SetRawBytes(out, pathContent, relay.JoinArray(kept)); err != nil {
		return msg, res, info, fmt.Errorf("messages: edit content: %w", err)
	}
	return out, res, info, nil
}

// continuation is the message's turn for promptgate to answer itself (onViolation "continue"), when
// every call of it was blocked and can be answered; nil otherwise. What the client keeps of it is
// its other blocks.
func continuation(c *vet.Checker, content gjson.Result, blocks []gjson.Result, calls []*vet.Call, ds []vet.Decision, drop map[int]bool) *relay.Continuation {
	t := relay.Turn{Raw: []byte(content.Raw)}
	var held []string
	for i, call := range calls {
		if !relay.Answerable(c, call, ds[i]) {
			return nil
		}
		a := relay.Answer(call, ds[i], false)
		t.Calls = append(t.Calls, a)
		if a.Notice != "" {
			held = append(held, string(textBlock(a.Notice)))
		}
	}
	var kept []string
	for i, b := range blocks {
		if !drop[i] {
			kept = append(kept, b.Raw)
		}
	}
	return &relay.Continuation{Turn: t, Kept: relay.JoinArray(append(kept, held...))}
}

// keptInfo describes a vetted message's content.
type keptInfo struct {
	blocks  int  // content blocks left
	toolUse bool // a tool_use block is left
}

// textBlock is a text content block.
func textBlock(text string) []byte {
	b, _ := sjson.SetBytes([]byte(`{"type":"text","text":""}`), "text", text)
	return b
}

// ErrorJSON is the data of an error event in Anthropic's shape,
// {"type":"error","error":{"type","message"}}, with the contract's code in error.code.
func ErrorJSON(message, typ, code string) []byte {
	b := []byte(`{"type":"error","error":{"type":"","message":"","code":""}}`)
	b, _ = sjson.SetBytes(b, "error.type", typ)
	b, _ = sjson.SetBytes(b, "error.message", message)
	b, _ = sjson.SetBytes(b, "error.code", code)
	return b
}
