package mcp

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// JSON-RPC error codes the door answers with.
const (
	codeParseError     = -32700
	codeInvalidRequest = -32600
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeInternalError  = -32603
)

// message is one JSON-RPC message of a body, as the door reads it.
type message struct {
	raw []byte
	// id is the id's raw JSON ("" for a notification); method "" for a response.
	id     string
	method string
	params gjson.Result
	// response: a result or an error (from the client: an answer to a server's request).
	response bool
}

// parseBody reads a POST body: one JSON-RPC message, or a batch (a non-empty array of them). The
// body must be one strict JSON value — no duplicate keys, no two keys that differ only in letter
// case, within maxDepth — so that every reader of it (the door's, the server's encoding/json, a
// case-insensitive decoder) sees the same message.
func parseBody(body []byte, maxDepth int) (msgs []message, batch bool, err error) {
	if err := jsoncheck.Value(body, jsoncheck.Limits{MaxDepth: maxDepth, FoldedKeys: true}); err != nil {
		return nil, false, &rpcError{code: codeParseError, msg: "mcp: the body is not one strict JSON value: " + reasonOf(err)}
	}
	v := gjson.ParseBytes(body)
	if v.IsArray() {
		var bad error
		v.ForEach(func(_, e gjson.Result) bool {
			m, err := parseMessage(e)
			if err != nil {
				bad = err
				return false
			}
			msgs = append(msgs, m)
			return true
		})
		if bad != nil {
			return nil, true, bad
		}
		if len(msgs) == 0 {
			return nil, true, &rpcError{code: codeInvalidRequest, msg: "mcp: an empty batch"}
		}
		return msgs, true, nil
	}
	m, err := parseMessage(v)
	if err != nil {
		return nil, false, err
	}
	return []message{m}, false, nil
}

// reasonOf names a jsoncheck error by its kind and offset, never by the bytes it found.
func reasonOf(err error) string {
	var je *jsoncheck.Error
	if errors.As(err, &je) {
		return fmt.Sprintf("%s at offset %d", je.Kind, je.Offset)
	}
	return "syntax error"
}

// parseMessage reads one message: jsonrpc "2.0"; a request or notification has a string method and
// params that are an object when present; a request's id is a string or an integer; a response has
// an id and exactly one of result and error.
func parseMessage(v gjson.Result) (message, error) {
	invalid := func(why string) (message, error) {
		return message{}, &rpcError{code: codeInvalidRequest, msg: "mcp: not a JSON-RPC 2.0 message: " + why}
	}
	if !v.IsObject() {
		return invalid("a message is an object")
	}
	if foldedMember(v, messageMembers) {
		return message{}, errFoldedMember
	}
	if j := v.Get("jsonrpc"); j.Type != gjson.String || j.Str != "2.0" {
		return invalid(`jsonrpc must be "2.0"`)
	}
	m := message{raw: []byte(v.Raw)}
	id := v.Get("id")
	if id.Exists() {
		if !(id.Type == gjson.String || id.Type == gjson.Number && isInteger(id.Raw)) {
			return invalid("an id is a string or an integer")
		}
		m.id = id.Raw
	}
	method := v.Get("method")
	res, rerr := v.Get("result"), v.Get("error")
	switch {
	case method.Exists():
		if method.Type != gjson.String || method.Str == "" {
			return invalid("a method is a non-empty string")
		}
		if res.Exists() || rerr.Exists() {
			return invalid("a request carries no result or error")
		}
		m.method = method.Str
		m.params = v.Get("params")
		if m.params.Exists() && !m.params.IsObject() {
			return invalid("params are an object")
		}
		if foldedMember(m.params, paramMembers) {
			return message{}, errFoldedMember
		}
	case res.Exists() != rerr.Exists() && id.Exists():
		m.response = true
	default:
		return invalid("neither a request, a notification nor a response")
	}
	return m, nil
}

// The members the door reads of a message and of its params. A server that decodes with
// encoding/json matches member names without regard to case (as strings.EqualFold folds, "ſ" for
// "s" included), so a key that differs from one of them in case only is that member to the server
// and not to the door.
var (
	messageMembers = []string{"jsonrpc", "id", "method", "params", "result", "error"}
	paramMembers   = []string{"name", "arguments", "uri", "_meta", "protocolVersion", "capabilities", "cursor"}
)

var errFoldedMember = &rpcError{code: codeInvalidRequest,
	msg: "mcp: a member's name differs from a JSON-RPC or MCP member in letter case only (a parser differential)"}

// foldedMember reports whether obj has a key that is not one of names but equals one of them
// without regard to case.
func foldedMember(obj gjson.Result, names []string) bool {
	found := false
	obj.ForEach(func(k, _ gjson.Result) bool {
		if slices.Contains(names, k.Str) {
			return true
		}
		for _, n := range names {
			if strings.EqualFold(k.Str, n) {
				found = true
				return false
			}
		}
		return true
	})
	return found
}

// isInteger reports whether a JSON number is written as an integer.
func isInteger(raw string) bool {
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; !(c >= '0' && c <= '9' || i == 0 && c == '-') {
			return false
		}
	}
	return raw != "" && raw != "-"
}

// rpcError is a refusal the door answers as a JSON-RPC error.
type rpcError struct {
	code int
	msg  string
}

func (e *rpcError) Error() string { return e.msg }

// errorMessage is a JSON-RPC error answer to id ("" answers null: the id could not be read).
func errorMessage(id string, code int, msg string) []byte {
	if id == "" {
		id = "null"
	}
	out := `{"jsonrpc":"2.0","id":` + id + `,"error":{"code":` + fmt.Sprint(code) + `,"message":` + jsonString(msg) + `}}`
	return []byte(out)
}

// resultMessage is a JSON-RPC result answer to id.
func resultMessage(id string, result []byte) []byte {
	return []byte(`{"jsonrpc":"2.0","id":` + id + `,"result":` + string(result) + `}`)
}
