// Package responses is the OpenAI Responses API surface (POST /v1/responses): how its request is
// read, its tool_choice checked and the layered prompt and kept tools written back (request.go);
// how a conversation continues across requests and what this instance remembers for it — the calls
// it blocked, the output it showed, the policy of background responses, each response's
// instructions (stored.go, echo.go); how a retrieval or a cancel is shown; and how the tool calls
// of its answers are vetted before the client sees them — the non-stream body (Body) and the SSE
// stream (Stream).
//
// The calls it vets are the output items of type function_call (and custom_tool_call, whose
// free-form input is refused as an unsupported type, as on Chat Completions). Built-in tool items
// (web_search_call, file_search_call, mcp_call, ...) are passed on: those tools are governed on the
// request side, by their type name; but an item the client acts on (local_shell_call, shell_call,
// apply_patch_call, computer_call, mcp_approval_request) for a built-in tool outside the allowed
// set is blocked like a call of a tool that is not allowed.
//
// It owns the Responses wire shapes, edited with gjson/sjson on the raw bytes, never a re-marshal.
// It does not build the prompt (assembly does), decide whether a call is allowed (policy/vet does),
// pick the mode or the allowed set (policy/ does) or store decisions (the proxy's recorder does);
// in error mode Body reports the blocked call and the proxy answers 403.
package responses

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
)

// Reasons of this package, next to policy/vet's. They hold no argument bytes.
const (
	// ReasonIncomplete: the response ended (or the next item started at the call's place) before
	// the call's output_item.done.
	ReasonIncomplete = "call ended before it was complete"
	// ReasonChanged: the events of one call disagree (item id, call id, type or arguments differ
	// between output_item.added, the argument events, output_item.done and the final response).
	ReasonChanged = "call changed between events"
)

// Paths and values of the Responses wire format.
const (
	pathOutput     = "output"
	pathUsage      = "usage"
	pathType       = "type"
	pathID         = "id"
	pathCallID     = "call_id"
	pathName       = "name"
	pathArguments  = "arguments"
	typeFunction   = "function_call"
	typeCustomTool = "custom_tool_call"
	typeReasoning  = "reasoning"
	// maxDepth caps the nesting of response JSON (bodies and stream events).
	maxDepth = 128
)

// vetted reports whether an output item type is a call this package vets: also a type that differs
// from a call type in case only, which clients that read enums without regard to case take for it
// (such a call is blocked as an unsupported type).
func vetted(typ string) bool {
	return strings.EqualFold(typ, typeFunction) || strings.EqualFold(typ, typeCustomTool)
}

// clientTools maps the output item types of built-in tools that the client acts on (runs a command,
// applies a patch, performs a computer action, answers an approval request) to the tool types that
// allow them.
var clientTools = map[string][]string{
	"local_shell_call":     {"local_shell"},
	"shell_call":           {"shell"},
	"apply_patch_call":     {"apply_patch"},
	"computer_call":        {"computer_use_preview", "computer_use", "computer"},
	"mcp_approval_request": {"mcp"},
}

// refusedBuiltin returns, for an item the client would act on for a built-in tool outside the
// allowed set, the tool's type (the name in the notice); "" for any other item. Such an item is a
// call that is blocked (vet.ReasonNotAllowed), whatever the upstream says: the request side only
// removes the tool, an upstream that produces its items anyway is not trusted.
func refusedBuiltin(c *vet.Checker, typ string) string {
	tools, ok := clientTools[typ]
	if !ok && typ != "" {
		for it, ts := range clientTools {
			if strings.EqualFold(typ, it) { // a case variant, as for vetted
				tools, ok = ts, true
				break
			}
		}
	}
	if !ok {
		return ""
	}
	for _, t := range tools {
		if c.Allows(t) {
			return ""
		}
	}
	return tools[0]
}

// isCall reports whether an output item type is a call this package vets (refusedBuiltin included).
func isCall(c *vet.Checker, typ string) bool { return vetted(typ) || refusedBuiltin(c, typ) != "" }

// Body vets a non-stream Responses body (raw bytes) and returns it, edited with sjson where needed.
//
// refuse: blocked function_call items are removed from output; where no call item is left, one
// message item with the notices (`[promptgate] blocked tool call NAME: REASON`, one line each) is
// appended; where one is left, a message item with its notice takes the place of a call held for
// confirmation. error: the body is returned unchanged and Result.ErrorCall is set. audit:
// unchanged; violations recorded as audited. A body that is not one valid JSON object with unique
// keys is an error.
func Body(body []byte, c *vet.Checker, rec relay.Recorder) ([]byte, relay.Result, error) {
	var res relay.Result
	if err := checkBody(body); err != nil {
		return body, res, err
	}
	output := gjson.GetBytes(body, pathOutput)
	if !output.IsArray() {
		return body, res, nil
	}
	items := output.Array()
	var calls []*vet.Call
	var at []int // position in output of each call
	for i, it := range items {
		if call := itemCall(c, i, it); call != nil {
			calls = append(calls, call)
			at = append(at, i)
		}
	}
	if len(calls) == 0 {
		return body, res, nil
	}
	drop := map[int]bool{}
	held := map[int]string{} // output position -> the notice of a call held for confirmation
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
	if res.ErrorCall != nil || len(drop) == 0 {
		return body, res, nil
	}
	blocked := len(drop)
	dropLeads(items, drop)
	res.Continue = continuation(c, body, output, items, calls, at, ds, drop)
	kept := make([]string, 0, len(items))
	for i, it := range items {
		switch {
		case !drop[i]:
			kept = append(kept, it.Raw)
		case blocked < len(calls) && held[i] != "":
			// A held call's notice takes its place in any case: it carries the code that releases
			// the call.
			kept = append(kept, string(noticeItem(newNoticeID(), held[i], true)))
		}
	}
	if blocked == len(calls) {
		kept = append(kept, string(noticeItem(newNoticeID(), strings.Join(notices, "\n"), true)))
	}
	out, err := sjson.SetRawBytes(body, pathOutput, relay.JoinArray(kept))
	if err != nil {
		return body, res, fmt.Errorf("responses: edit output: %w", err)
	}
	return out, res, nil
}

// checkBody refuses a response body that is not one strict JSON object, or whose keys a
// case-insensitive reader would read otherwise (foldedKeys).
func checkBody(body []byte) error {
	if err := jsoncheck.Object(body, jsoncheck.Limits{MaxDepth: maxDepth}); err != nil {
		return fmt.Errorf("responses: response body: %w", err)
	}
	if foldedKeys(body) {
		return fmt.Errorf("responses: response body: a key differs from a known one in case only")
	}
	return nil
}

// continuation is the response's turn for promptgate to answer itself (onViolation "continue"),
// when every call of it was blocked and is a function (or custom tool) call it can answer; nil
// otherwise. What the client keeps of it is its other items (without the reasoning right before a
// refused call).
func continuation(c *vet.Checker, body []byte, output gjson.Result, items []gjson.Result, calls []*vet.Call, at []int, ds []vet.Decision, drop map[int]bool) *relay.Continuation {
	t := relay.Turn{Raw: []byte(output.Raw), ResponseID: gjson.GetBytes(body, pathID).String()}
	var held []string
	for i, call := range calls {
		typ := items[at[i]].Get(pathType).Str
		if !relay.Answerable(c, call, ds[i]) || typ != typeFunction && typ != typeCustomTool {
			return nil
		}
		a := relay.Answer(call, ds[i], typ == typeCustomTool)
		t.Calls = append(t.Calls, a)
		if a.Notice != "" {
			held = append(held, string(noticeItem(newNoticeID(), a.Notice, true)))
		}
	}
	var kept []string
	for i, it := range items {
		if !drop[i] {
			kept = append(kept, it.Raw)
		}
	}
	return &relay.Continuation{Turn: t, Kept: relay.JoinArray(append(kept, held...))}
}

// dropLeads adds to drop the reasoning items right before each item in it: a stateless client
// replays the output as its next input, and the API refuses a reasoning item without the item that
// followed it.
func dropLeads(items []gjson.Result, drop map[int]bool) {
	for i := len(items) - 1; i > 0; i-- {
		if drop[i] && items[i-1].Get(pathType).Str == typeReasoning {
			drop[i-1] = true
		}
	}
}

// WithoutCalls removes from a response body (a retrieval of a stored response) the function calls
// whose call_id is in ids, and the reasoning items right before them. It returns how many calls it
// removed.
func WithoutCalls(body []byte, ids map[string]bool) ([]byte, int, error) {
	output := gjson.GetBytes(body, pathOutput)
	if !output.IsArray() {
		return body, 0, nil
	}
	items := output.Array()
	drop := map[int]bool{}
	for i, it := range items {
		if it.Get(pathType).Str == typeFunction && ids[it.Get(pathCallID).Str] {
			drop[i] = true
		}
	}
	removed := len(drop)
	if removed == 0 {
		return body, 0, nil
	}
	dropLeads(items, drop)
	kept := make([]string, 0, len(items))
	for i, it := range items {
		if !drop[i] {
			kept = append(kept, it.Raw)
		}
	}
	out, err := sjson.SetRawBytes(body, pathOutput, relay.JoinArray(kept))
	if err != nil {
		return body, 0, fmt.Errorf("responses: edit output: %w", err)
	}
	return out, removed, nil
}

// respKeys are the keys a client reads a call from: of a stream event, of the item or response it
// carries, of a response, and of an output item.
var respKeys = []string{pathType, pathItem, pathOutputIdx, pathItemID, "delta", pathArguments, pathResponse, pathOutput,
	pathName, pathCallID, pathID, "input", "action", "operation", "status", pathSeq}

// foldedKeys reports whether an object a client reads a call from — v (an event or a response), its
// item, its response, and each output item of either — has a key that is not one of respKeys but
// equals one under Unicode case folding. Case-insensitive JSON readers (Go's encoding/json,
// System.Text.Json with the web defaults) take such a key for the known one, the later of the two
// winning, while this package reads keys exactly: such data is malformed. The keys inside those
// objects (an action, a snapshot's tools and metadata) are the tool's or the app's own and are not
// looked at. data must be valid JSON.
func foldedKeys(data []byte) bool {
	if !relay.KeysMayFold(data, respKeys) {
		return false
	}
	v := relay.Get(data, "@this")
	for _, o := range []gjson.Result{v, v.Get(pathItem), v.Get(pathResponse)} {
		if foldedKey(o) {
			return true
		}
	}
	found := false
	for _, out := range []gjson.Result{v.Get(pathOutput), v.Get(pathRespOutput)} {
		out.ForEach(func(_, it gjson.Result) bool {
			found = foldedKey(it)
			return !found
		})
		if found {
			return true
		}
	}
	return false
}

// foldedKey reports whether an object has a key that differs from one of respKeys in case only.
func foldedKey(o gjson.Result) bool {
	if !o.IsObject() {
		return false
	}
	found := false
	o.ForEach(func(k, _ gjson.Result) bool {
		for _, n := range respKeys {
			// A variant of an ASCII name is never shorter than it (ſ and K, which fold to s and k,
			// are longer).
			if len(k.Str) >= len(n) && k.Str != n && strings.EqualFold(k.Str, n) {
				found = true
				return false
			}
		}
		return true
	})
	return found
}

// itemCall reads an output item into a call, or returns nil when the item is not a call this
// package vets.
func itemCall(c *vet.Checker, index int, it gjson.Result) *vet.Call {
	typ := it.Get(pathType)
	if typ.Type != gjson.String || !isCall(c, typ.Str) {
		return nil
	}
	call := &vet.Call{Index: index}
	if id := it.Get(pathCallID); id.Type == gjson.String {
		call.ID = id.Str
	}
	if tool := refusedBuiltin(c, typ.Str); tool != "" {
		call.AddName(tool)
		call.Fail(vet.ReasonNotAllowed)
		return call
	}
	if name := it.Get(pathName); name.Type == gjson.String {
		call.AddName(name.Str)
	}
	if typ.Str != typeFunction { // custom_tool_call, or a case variant of a call type
		call.Fail(vet.ReasonUnsupportedType)
		return call
	}
	switch args := it.Get(pathArguments); {
	case args.Type == gjson.String:
		call.AppendArgs(args.Str)
	case args.Exists():
		call.Fail(vet.ReasonNotString)
	}
	return call
}

// newNoticeID is a fresh id for a notice message item: never a blocked call's id.
func newNoticeID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "msg_promptgate_" + hex.EncodeToString(b[:])
}

// noticeItem is a message output item with one output_text part holding text; completed says
// whether it is the finished item (status completed, the text in) or the item as first announced
// (in_progress, no parts).
func noticeItem(id, text string, completed bool) []byte {
	b := assembly.AppendJSONString(append(make([]byte, 0, 128+len(text)), `{"id":`...), id)
	if !completed {
		return append(b, `,"type":"message","status":"in_progress","content":[],"role":"assistant"}`...)
	}
	b = append(b, `,"type":"message","status":"completed","content":[`...)
	return append(append(b, textPart(text)...), `],"role":"assistant"}`...)
}

// textPart is an output_text content part.
func textPart(text string) []byte {
	p := append(make([]byte, 0, 64+len(text)), `{"type":"output_text","annotations":[],"logprobs":[],"text":`...)
	return append(assembly.AppendJSONString(p, text), '}')
}

// ErrorJSON is the data of an error event: OpenAI's Responses error event
// ({"type":"error","code","message", "param","sequence_number"}) that also carries the contract's
// {"error":{"message","type","param","code"}}, so that both a typed Responses client and the
// official SDKs' generic error check see it.
func ErrorJSON(seq int64, message, typ, code string) []byte {
	b := []byte(`{"type":"error","code":"","message":"","param":null,"sequence_number":0,"error":{"message":"","type":"","param":null,"code":""}}`)
	b, _ = sjson.SetBytes(b, "code", code)
	b, _ = sjson.SetBytes(b, "message", message)
	b, _ = sjson.SetBytes(b, "sequence_number", seq)
	b, _ = sjson.SetBytes(b, "error.message", message)
	b, _ = sjson.SetBytes(b, "error.type", typ)
	b, _ = sjson.SetBytes(b, "error.code", code)
	return b
}
