package assembly

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy"
)

// JSON paths of the request extension and of Chat Completions bodies.
const (
	PathExtension     = "promptgate"
	pathMessages      = "messages"
	pathTools         = "tools"
	pathFunctions     = "functions"
	pathToolChoice    = "tool_choice"
	pathFunctionCall  = "function_call"
	pathParallelCalls = "parallel_tool_calls"
	pathModel         = "model"
	pathStream        = "stream"
)

// Extension is the request's "promptgate" field.
type Extension struct {
	Protocol, Workflow, User, Conversation string
	// Context is the raw JSON of promptgate.context (untrusted data), nil when absent.
	Context []byte
}

// invalid returns a 400 for a request whose shape is wrong.
func invalid(param, format string, args ...any) *policy.Error {
	return &policy.Error{Status: http.StatusBadRequest, Code: "invalid_request", Param: param, Message: fmt.Sprintf(format, args...)}
}

// ParseExtension reads the top-level "promptgate" field of any surface's body. Unknown keys and values of the
// wrong type are errors, so that a typo never silently weakens a request's policy.
func ParseExtension(body []byte) (Extension, error) {
	var x Extension
	f := gjson.GetBytes(body, PathExtension)
	if !f.Exists() {
		return x, nil
	}
	if !f.IsObject() {
		return x, invalid(PathExtension, "promptgate must be an object")
	}
	var err error
	f.ForEach(func(k, v gjson.Result) bool {
		key := k.String()
		str := func(dst *string) {
			if v.Type != gjson.String {
				err = invalid(PathExtension+"."+key, "promptgate.%s must be a string", key)
				return
			}
			*dst = v.String()
		}
		switch key {
		case "protocol":
			str(&x.Protocol)
		case "workflow":
			str(&x.Workflow)
		case "user":
			str(&x.User)
		case "conversation":
			str(&x.Conversation)
		case "context":
			if v.Type != gjson.Null {
				x.Context = []byte(v.Raw)
			}
		default:
			err = invalid(PathExtension+"."+key, "unknown field promptgate.%s; known: protocol, workflow, user, conversation, context", key)
		}
		return err == nil
	})
	return x, err
}

// Chat is what assembly and policy need of a /v1/chat/completions request, read with gjson.
type Chat struct {
	Model  string
	Stream bool
	// Application are the texts of the client's system and developer messages, in order.
	Application []string
	// Tools are the declared tools: "tools" entries (function name, custom tool name, else the type), then
	// legacy "functions".
	Tools []policy.Tool
	// NativeTools is true when the client declared tools or functions.
	NativeTools bool
	// LatestUser is the text of the last user message.
	LatestUser string
}

// ParseChat reads a validated Chat Completions body.
func ParseChat(body []byte) (*Chat, error) {
	c := &Chat{Model: gjson.GetBytes(body, pathModel).String(), Stream: gjson.GetBytes(body, pathStream).Type == gjson.True}
	msgs := gjson.GetBytes(body, pathMessages)
	if !msgs.IsArray() {
		return nil, invalid(pathMessages, "messages must be an array")
	}
	var err error
	i := 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		if !m.IsObject() {
			err = invalid(fmt.Sprintf("messages[%d]", i), "messages[%d] must be an object", i)
			return false
		}
		switch m.Get("role").String() {
		case "system", "developer":
			c.Application = append(c.Application, contentText(m.Get("content")))
		case "user":
			c.LatestUser = contentText(m.Get("content"))
		}
		i++
		return true
	})
	if err != nil {
		return nil, err
	}
	if t := gjson.GetBytes(body, pathTools); t.Exists() && t.Type != gjson.Null {
		if !t.IsArray() {
			return nil, invalid(pathTools, "tools must be an array")
		}
		t.ForEach(func(_, v gjson.Result) bool {
			c.Tools = append(c.Tools, chatTool(v))
			return true
		})
		c.NativeTools = c.NativeTools || len(t.Array()) > 0
	}
	if f := gjson.GetBytes(body, pathFunctions); f.Exists() && f.Type != gjson.Null {
		if !f.IsArray() {
			return nil, invalid(pathFunctions, "functions must be an array")
		}
		f.ForEach(func(_, v gjson.Result) bool {
			c.Tools = append(c.Tools, policy.Tool{Name: v.Get("name").String(), Description: v.Get("description").String(), Schema: rawOrNil(v.Get("parameters"))})
			return true
		})
		c.NativeTools = c.NativeTools || len(f.Array()) > 0
	}
	return c, nil
}

// chatTool reads one "tools" entry: {"type":"function","function":{...}}, {"type":"custom","custom":{...}},
// or another type, which is governed by its type name.
func chatTool(v gjson.Result) policy.Tool {
	typ := v.Get("type").String()
	switch typ {
	case "function", "":
		fn := v.Get("function")
		return policy.Tool{Name: fn.Get("name").String(), Description: fn.Get("description").String(), Schema: rawOrNil(fn.Get("parameters"))}
	case "custom":
		c := v.Get("custom")
		return policy.Tool{Name: c.Get("name").String(), Description: c.Get("description").String()}
	}
	return policy.Tool{Name: typ}
}

func rawOrNil(r gjson.Result) []byte {
	if !r.Exists() || r.Type == gjson.Null {
		return nil
	}
	return []byte(r.Raw)
}

// contentText is the text of a message content: a string, or the "text" of its text parts.
func contentText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.String()
	}
	if !c.IsArray() {
		return ""
	}
	var parts []string
	c.ForEach(func(_, p gjson.Result) bool {
		if t := p.Get("text"); t.Type == gjson.String {
			parts = append(parts, t.String())
		}
		return true
	})
	return strings.Join(parts, "\n")
}

// ChatToolChoice checks tool_choice and legacy function_call against the kept tools. A choice naming a tool
// that is not kept, or "required" with nothing kept, is a 400 tool_choice_not_allowed.
func ChatToolChoice(body []byte, kept []policy.Tool) error {
	keptSet := make(map[string]bool, len(kept))
	for _, t := range kept {
		keptSet[t.Name] = true
	}
	notAllowed := func(param, format string, args ...any) error {
		return &policy.Error{Status: http.StatusBadRequest, Code: "tool_choice_not_allowed", Param: param, Message: fmt.Sprintf(format, args...)}
	}
	tc := gjson.GetBytes(body, pathToolChoice)
	switch {
	case tc.Type == gjson.String:
		if tc.String() == "required" && len(kept) == 0 {
			return notAllowed(pathToolChoice, "tool_choice is \"required\" but no tool is allowed for this request")
		}
	case tc.IsObject():
		var names []string
		switch tc.Get("type").String() {
		case "allowed_tools":
			tc.Get("allowed_tools.tools").ForEach(func(_, t gjson.Result) bool {
				names = append(names, chatTool(t).Name)
				return true
			})
			if tc.Get("allowed_tools.mode").String() == "required" && len(kept) == 0 {
				return notAllowed(pathToolChoice, "tool_choice requires a tool but no tool is allowed for this request")
			}
		default:
			names = append(names, chatTool(tc).Name)
		}
		for _, n := range names {
			if !keptSet[n] {
				return notAllowed(pathToolChoice, "tool_choice names tool %q, which is not allowed for this request", n)
			}
		}
	}
	fc := gjson.GetBytes(body, pathFunctionCall)
	if fc.IsObject() {
		if n := fc.Get("name").String(); !keptSet[n] {
			return notAllowed(pathFunctionCall, "function_call names function %q, which is not allowed for this request", n)
		}
	}
	return nil
}

// RewriteChat returns the upstream body: messages replaced by the layered system message (plus the context
// message in the structured channel) and the client's non-system messages in order; tools and functions
// filtered to the kept ones; the promptgate field removed. Every other byte stays as the client sent it.
func RewriteChat(body []byte, p Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	var msgs bytes.Buffer
	msgs.Grow(len(body) + len(p.System) + 64)
	msgs.WriteString(`[{"role":"system","content":`)
	msgs.Write(JSONString(p.System))
	msgs.WriteByte('}')
	if p.ContextMessage != "" {
		msgs.WriteString(`,{"role":"system","content":`)
		msgs.Write(JSONString(p.ContextMessage))
		msgs.WriteByte('}')
	}
	gjson.GetBytes(body, pathMessages).ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").String() {
		case "system", "developer":
			return true
		}
		msgs.WriteByte(',')
		msgs.WriteString(m.Raw)
		return true
	})
	msgs.WriteByte(']')
	out, err := sjson.SetRawBytes(body, pathMessages, msgs.Bytes())
	if err != nil {
		return nil, fmt.Errorf("assembly: set messages: %w", err)
	}
	if removedAny {
		if out, err = filterToolArrays(out, kept); err != nil {
			return nil, err
		}
	}
	if gjson.GetBytes(out, PathExtension).Exists() {
		if out, err = sjson.DeleteBytes(out, PathExtension); err != nil {
			return nil, fmt.Errorf("assembly: remove promptgate field: %w", err)
		}
	}
	if p.DatamarkToolOutput {
		return DatamarkChat(out)
	}
	return out, nil
}

// filterToolArrays keeps, in "tools" and "functions", the first entry of each kept name. An array left
// empty is removed together with tool_choice / function_call and parallel_tool_calls, which the API only
// accepts alongside tools.
func filterToolArrays(body []byte, kept []policy.Tool) ([]byte, error) {
	keptSet := make(map[string]bool, len(kept))
	for _, t := range kept {
		keptSet[t.Name] = true
	}
	used := map[string]bool{}
	var err error
	filter := func(path string, name func(gjson.Result) string, deps ...string) {
		arr := gjson.GetBytes(body, path)
		if err != nil || !arr.IsArray() {
			return
		}
		var b bytes.Buffer
		b.WriteByte('[')
		n := 0
		arr.ForEach(func(_, v gjson.Result) bool {
			nm := name(v)
			if keptSet[nm] && !used[nm] {
				used[nm] = true
				if n > 0 {
					b.WriteByte(',')
				}
				b.WriteString(v.Raw)
				n++
			}
			return true
		})
		b.WriteByte(']')
		if n == 0 {
			for _, p := range append([]string{path}, deps...) {
				if gjson.GetBytes(body, p).Exists() {
					if body, err = sjson.DeleteBytes(body, p); err != nil {
						return
					}
				}
			}
			return
		}
		body, err = sjson.SetRawBytes(body, path, b.Bytes())
	}
	filter(pathTools, func(v gjson.Result) string { return chatTool(v).Name }, pathToolChoice, pathParallelCalls)
	filter(pathFunctions, func(v gjson.Result) string { return v.Get("name").String() }, pathFunctionCall)
	if err != nil {
		return nil, fmt.Errorf("assembly: filter tools: %w", err)
	}
	return body, nil
}

// JSONString encodes s as a JSON string without HTML escaping.
func JSONString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimRight(b.Bytes(), "\n")
}
