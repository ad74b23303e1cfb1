package mcp

import (
	"errors"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// The door edits what a server answers (a tools/list result is filtered by the protocol and its
// definitions pinned and scanned) and passes the rest; the agent's client reads the edited answer.
// So the door must read the answer as every client does, or refuse it. A client takes the last of a
// repeated member (the door's gjson the first), encoding/json matches member names without regard
// to case ("Tools", "Deſcription"), and a JSON-RPC client matches an answer to its request by the
// id's value (the Go SDK reads the id 1.0 as 1; ids are not compared as the door wrote them).
// Therefore: a message of the server's that repeats a member at any depth is refused; one whose own
// members, whose result's or whose tool definitions' members are named like one a client reads in
// another case is refused; and every answer whose result holds tools is filtered, whatever its id
// and whatever request it answers (a resumed stream, GET, carries answers to a POST's requests).

// resultMembers and toolMembers are the members of a result and of a tool definition that clients
// read: a key equal to one of them without regard to case, but not exactly, is that member to a
// decoder that folds case.
var (
	resultMembers = []string{"tools", "nextCursor", "_meta", "content", "structuredContent", "isError"}
	toolMembers   = []string{"name", "title", "description", "inputSchema", "outputSchema", "annotations", "icons", "_meta"}
)

// errTwoReadings is the refusal of a server's message that clients could read otherwise than the
// door.
var errTwoReadings = errors.New("mcp: the server's answer can be read in more than one way (a parser differential): promptgate refused it")

// errContentCoding is the refusal of a server's answer in a content coding: the door reads answers
// uncompressed (it asks for nothing else), and a client would decode what the door could not read.
var errContentCoding = errors.New("mcp: the server answered in a content coding the door did not ask for")

// encoded reports whether an answer comes in a content coding other than identity.
func encoded(h http.Header) bool {
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return true
			}
		}
	}
	return false
}

// strictAnswer checks a message (or batch) of the server's as the door must read it (see
// readAnswer).
func (x *exchange) strictAnswer(msg []byte) error { return readAnswer(msg, x.d.o.Limits.MaxJSONDepth) }

// readAnswer checks a message (or batch) of a server's: one JSON value with no member repeated at
// any depth, within maxDepth, and no member of a message, of its result or of a tool definition
// named like one a client reads in another case.
func readAnswer(msg []byte, maxDepth int) error {
	if jsoncheck.Value(msg, jsoncheck.Limits{MaxDepth: maxDepth}) != nil {
		return errTwoReadings
	}
	v := gjson.ParseBytes(msg)
	if v.IsArray() {
		var err error
		v.ForEach(func(_, e gjson.Result) bool {
			err = foldedAnswer(e)
			return err == nil
		})
		return err
	}
	return foldedAnswer(v)
}

// foldedAnswer refuses a message with a member named like one a client reads in another case: its
// own, its result's, its tool definitions'.
func foldedAnswer(v gjson.Result) error {
	if !v.IsObject() {
		return nil
	}
	res := v.Get("result")
	if foldedMember(v, messageMembers) || foldedMember(res, resultMembers) {
		return errTwoReadings
	}
	var err error
	res.Get("tools").ForEach(func(_, t gjson.Result) bool {
		if foldedMember(t, toolMembers) {
			err = errTwoReadings
		}
		return err == nil
	})
	return err
}

// answerID is the id of a message to answer a refusal with: the message's id where it is a string
// or an integer written plainly, else null.
func answerID(msg []byte) string {
	id := gjson.GetBytes(msg, "id")
	if id.Type == gjson.String || id.Type == gjson.Number && isInteger(id.Raw) {
		return id.Raw
	}
	return "null"
}

// edit applies the door's edits to a message (or a batch) of the server's: every result that holds
// tools is filtered (a tools/list answer, whatever its id); a change of the server's list is noted
// for its next call. A message the door could read otherwise than a client is replaced by a
// JSON-RPC error.
func (x *exchange) edit(msg []byte) []byte {
	if err := x.strictAnswer(msg); err != nil {
		x.record(audit.Event{Kind: KindList, Verdict: audit.VerdictBlocked, Reason: err.Error()})
		return errorMessage(answerID(msg), codeInternalError, err.Error())
	}
	v := gjson.ParseBytes(msg)
	if !v.IsArray() {
		return x.editOne(v, msg)
	}
	var out [][]byte
	v.ForEach(func(_, e gjson.Result) bool {
		out = append(out, x.editOne(e, []byte(e.Raw)))
		return true
	})
	return joinRaw(out)
}

// editOne edits one message of the server's (see edit).
func (x *exchange) editOne(v gjson.Result, msg []byte) []byte {
	if !v.IsObject() {
		return msg
	}
	switch m := v.Get("method").String(); m {
	case "notifications/tools/list_changed":
		x.d.o.Pins.SetFresh(x.srv.Name, false)
		x.log.Info("the MCP server's tool list changed; its definitions are read again before its next call")
		return msg
	case "sampling/createMessage":
		x.wrote(v.Get("params.messages.#.content"))
		return msg
	}
	// A prompt's messages (prompts/get), which clients insert as the user's, and a resource's
	// contents (resources/read), which they attach: known by their shape, whatever the request.
	x.wrote(v.Get("result.messages.#.content"))
	x.wrote(v.Get("result.contents"))
	tools := v.Get("result.tools")
	if !tools.Exists() {
		return msg
	}
	if !tools.IsArray() || x.governed() != nil {
		return errorMessage(answerID(msg), codeInternalError, "mcp: the server's list of tools cannot be read")
	}
	kept, err := x.filterList(tools)
	if err != nil {
		x.record(audit.Event{Kind: KindList, Verdict: audit.VerdictBlocked, Reason: err.Error()})
		return errorMessage(answerID(msg), codeInternalError, err.Error())
	}
	out, err := sjson.SetRawBytes(msg, "result.tools", kept)
	if err != nil {
		return errorMessage(answerID(msg), codeInternalError, "mcp: the server's list of tools cannot be edited")
	}
	return out
}

// wrote records the texts a server wrote for the client to hand its model as the user's — the
// contents of a sampling request's or a prompt's messages (each one block or a list of them), a
// resource's contents — so that a request to the model through promptgate that carries one has it
// labelled mcp:SERVER (mcpjoin.Record.Wrote), as the server's outputs are.
func (x *exchange) wrote(contents gjson.Result) {
	contents.ForEach(func(_, c gjson.Result) bool {
		if c.IsObject() {
			c = gjson.Parse("[" + c.Raw + "]")
		}
		c.ForEach(func(_, block gjson.Result) bool {
			if text := block.Get("text"); text.Type == gjson.String {
				x.d.o.Calls.Wrote(x.srv.Name, text.Str)
			}
			return true
		})
		return true
	})
}

// governed makes sure the exchange has its protocol: a GET stream, which carries answers to the
// session's requests too, is governed as its POSTs are.
func (x *exchange) governed() error {
	if x.gov.g != nil {
		return nil
	}
	g, err := x.d.govern(x.r, x.srv)
	if err != nil {
		return err
	}
	x.gov = g
	return nil
}
