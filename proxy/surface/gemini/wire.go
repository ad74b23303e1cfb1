// Package gemini is Google's Gemini API surface (POST /v1beta/models/{model}:generateContent and
// :streamGenerateContent?alt=sse; every other /v1beta/ path goes to the Gemini upstream unchanged):
// how its route and request are read, its toolConfig checked and the layered prompt and kept tools
// written back (request.go), how its conversation is read for the information-flow rules and a
// refused turn appended (transcript.go, turn.go), and how the functionCall parts of its answers are
// vetted before the client sees them — the non-stream body (Body) and the SSE stream (Stream),
// every candidate.
//
// Google reads a request's JSON as proto3 JSON: every field by its lowerCamelCase name or its
// snake_case proto name. This package reads every field it judges both ways, and refuses a body
// that gives one field both ways (readers differ on which wins); its answers' clients do the same
// (the Python SDK takes either).
//
// It owns the Gemini wire shapes, edited with gjson/sjson on the raw bytes, never a re-marshal. It
// does not build the prompt (assembly does), decide whether a call is allowed (policy/vet does),
// pick the mode or the allowed set (policy/ does) or store decisions (the caller's Recorder does).
package gemini

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
)

// name is a field of the Gemini wire format by both names Google reads it by: "functionCall
// function_call", or one name where both are the same.
type name string

// camel is the field's lowerCamelCase name; snake its proto name.
func (n name) camel() string { c, _, _ := strings.Cut(string(n), " "); return c }
func (n name) snake() string {
	if _, s, ok := strings.Cut(string(n), " "); ok {
		return s
	}
	return string(n)
}

// Fields of requests and answers.
const (
	fContents      name = "contents"
	fRole          name = "role"
	fParts         name = "parts"
	fText          name = "text"
	fThought       name = "thought"
	fFunctionCall  name = "functionCall function_call"
	fFunctionResp  name = "functionResponse function_response"
	fName          name = "name"
	fArgs          name = "args"
	fResponse      name = "response"
	fID            name = "id"
	fSystem        name = "systemInstruction system_instruction"
	fTools         name = "tools"
	fDeclarations  name = "functionDeclarations function_declarations"
	fDescription   name = "description"
	fParameters    name = "parameters"
	fParamsJSON    name = "parametersJsonSchema parameters_json_schema"
	fToolConfig    name = "toolConfig tool_config"
	fCallingConfig name = "functionCallingConfig function_calling_config"
	fMode          name = "mode"
	fAllowedNames  name = "allowedFunctionNames allowed_function_names"
	fCached        name = "cachedContent cached_content"
	fGenConfig     name = "generationConfig generation_config"
	fCandidateN    name = "candidateCount candidate_count"
	fCandidates    name = "candidates"
	fContent       name = "content"
	fIndex         name = "index"
	fFinish        name = "finishReason finish_reason"
	fUsage         name = "usageMetadata usage_metadata"
	fFeedback      name = "promptFeedback prompt_feedback"
	fBlockReason   name = "blockReason block_reason"
	fResponseID    name = "responseId response_id"
	fError         name = "error"
)

// answerKeys are the keys of an answer that a client reads a call from, both ways. A key that
// differs from one of them in letter case alone (outside a call's args) makes an answer malformed:
// Go's encoding/json, on which community clients are built, matches keys without regard to case
// (see relay.FoldedKey).
func answerKeys() []string {
	var out []string
	for _, n := range []name{fCandidates, fContent, fParts, fFunctionCall, fName, fArgs, fID, fText, fIndex, fFinish, fError} {
		out = append(out, n.camel())
		if n.snake() != n.camel() {
			out = append(out, n.snake())
		}
	}
	return out
}

// get is obj's member n, by either name; ok is false when obj gives it both ways.
func get(obj gjson.Result, n name) (v gjson.Result, ok bool) {
	a := obj.Get(n.camel())
	if n.snake() == n.camel() {
		return a, true
	}
	b := obj.Get(n.snake())
	switch {
	case a.Exists() && b.Exists():
		return gjson.Result{}, false
	case b.Exists():
		return b, true
	}
	return a, true
}

// key is the name obj gives member n by (its camelCase name when it has none).
func key(obj gjson.Result, n name) string {
	if n.snake() != n.camel() && obj.Get(n.snake()).Exists() {
		return n.snake()
	}
	return n.camel()
}

// Reasons and limits of this package.
const (
	// maxDepth caps the nesting of answers (bodies and stream events).
	maxDepth = 128
	// reasonBoth: a field given by both its names (functionCall and function_call).
	reasonBoth = "a field given by both its names"
)

// ErrorJSON is an error in Google's shape, {"error":{"code","message","status","details"}}, with
// the contract's code (tool_call_blocked, upstream_stream_truncated) as the reason of a
// google.rpc.ErrorInfo: Gemini clients read code as the HTTP status number (the Go SDK reads an
// error event only so).
func ErrorJSON(code int, status, message, reason string) []byte {
	b := []byte(`{"error":{"code":0,"message":"","status":"","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"","domain":"promptgate"}]}}`)
	b, _ = sjson.SetBytes(b, "error.code", code)
	b, _ = sjson.SetBytes(b, "error.message", message)
	b, _ = sjson.SetBytes(b, "error.status", status)
	b, _ = sjson.SetBytes(b, "error.details.0.reason", reason)
	return b
}

// blockedJSON is the error of a call blocked in error mode: the 403 body, and a stream's last
// event.
func blockedJSON(d vet.Decision) []byte {
	return ErrorJSON(403, "PERMISSION_DENIED", vet.Notice(d), relay.CodeToolCallBlocked)
}

// truncatedJSON is the last event of a stream whose upstream ended before its answer did.
func truncatedJSON() []byte {
	return ErrorJSON(502, "UNAVAILABLE", "upstream stream ended before its last candidate finished", relay.CodeTruncated)
}

// textPart is a text part.
func textPart(text string) []byte {
	b, _ := sjson.SetBytes([]byte(`{"text":""}`), "text", text)
	return b
}

// bothErr is the error of a body that gives a field both ways.
func bothErr(where string, n name) error {
	return fmt.Errorf("gemini: %s gives %s both as %s and as %s", where, n.camel(), n.camel(), n.snake())
}
