package assembly

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy"
)

// JSON paths of Anthropic Messages bodies (/v1/messages).
const pathSystem = "system"

// Messages is what assembly and policy need of an Anthropic /v1/messages request, read with gjson.
type Messages struct {
	Model  string
	Stream bool
	// Application is the client's own system: the string, or the text of each text block, in order.
	Application []string
	// Tools are the declared tools, each by its name (a client tool, or an Anthropic tool such as
	// {"type":"web_search_20250305","name":"web_search"}), or by its type when it has no name.
	Tools []policy.Tool
	// NativeTools is true when the client declared tools.
	NativeTools bool
	// LatestUser is the text of the last user message.
	LatestUser string
}

// ParseMessages reads a validated Anthropic Messages body: messages must be an array of objects, system a
// string or an array of text blocks (or absent), tools an array.
func ParseMessages(body []byte) (*Messages, error) {
	m := &Messages{Model: get(body, pathModel).String(), Stream: get(body, pathStream).Type == gjson.True}
	msgs := get(body, pathMessages)
	if !msgs.IsArray() {
		return nil, invalid(pathMessages, "messages must be an array")
	}
	var err error
	i := 0
	msgs.ForEach(func(_, msg gjson.Result) bool {
		if !msg.IsObject() {
			err = invalid(fmt.Sprintf("messages[%d]", i), "messages[%d] must be an object", i)
			return false
		}
		if msg.Get("role").String() == "user" {
			m.LatestUser = contentText(msg.Get("content"))
		}
		i++
		return true
	})
	if err != nil {
		return nil, err
	}
	switch sys := get(body, pathSystem); {
	case sys.Type == gjson.String:
		if sys.Str != "" {
			m.Application = append(m.Application, sys.Str)
		}
	case sys.IsArray():
		i := 0
		sys.ForEach(func(_, b gjson.Result) bool {
			if !b.IsObject() || b.Get("type").String() != "text" || b.Get("text").Type != gjson.String {
				err = invalid(fmt.Sprintf("system[%d]", i), "system[%d] must be a text block", i)
				return false
			}
			m.Application = append(m.Application, b.Get("text").Str)
			i++
			return true
		})
		if err != nil {
			return nil, err
		}
	case sys.Exists() && sys.Type != gjson.Null:
		return nil, invalid(pathSystem, "system must be a string or an array of text blocks")
	}
	if t := get(body, pathTools); t.Exists() && t.Type != gjson.Null {
		if !t.IsArray() {
			return nil, invalid(pathTools, "tools must be an array")
		}
		t.ForEach(func(_, v gjson.Result) bool {
			m.Tools = append(m.Tools, messagesTool(v))
			m.NativeTools = true
			return true
		})
	}
	return m, nil
}

// messagesTool reads one "tools" entry: a client tool {"name","description","input_schema"}, or an Anthropic
// tool ({"type":"bash_20250124","name":"bash"}, {"type":"web_search_20250305","name":"web_search"}), named by
// its name, else by its type.
func messagesTool(v gjson.Result) policy.Tool {
	name := v.Get("name").String()
	if name == "" {
		name = v.Get("type").String()
	}
	return policy.Tool{Name: name, Description: v.Get("description").String(), Schema: rawOrNil(v.Get("input_schema"))}
}

// MessagesToolChoice checks tool_choice against the kept tools: {"type":"tool","name":X} naming a tool that is
// not kept, or {"type":"any"} with nothing kept, is a 400 tool_choice_not_allowed.
func MessagesToolChoice(body []byte, kept []policy.Tool) error {
	tc := get(body, pathToolChoice)
	if !tc.IsObject() {
		return nil
	}
	switch tc.Get("type").String() {
	case "any":
		if len(kept) == 0 {
			return toolChoiceError(pathToolChoice, "tool_choice is \"any\" but no tool is allowed for this request")
		}
	case "tool":
		if n := tc.Get("name").String(); !nameSet(kept)[n] {
			return toolChoiceError(pathToolChoice, "tool_choice names tool %q, which is not allowed for this request", n)
		}
	}
	return nil
}

// RewriteMessages returns the upstream body of a /v1/messages request: system replaced by the layered prompt
// as one string (which holds the client's own system as APPLICATION INSTRUCTIONS; cache_control of the
// client's system blocks is not kept) — or, in the structured channel, by two text blocks, the layered prompt
// and the context block; tools filtered to the kept ones; the promptgate field removed. Messages and every
// other byte stay as the client sent them.
func RewriteMessages(body []byte, p Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	var sys []byte
	if p.ContextMessage == "" {
		sys = JSONString(p.System)
	} else {
		var b bytes.Buffer
		b.WriteString(`[{"type":"text","text":`)
		b.Write(JSONString(p.System))
		b.WriteString(`},{"type":"text","text":`)
		b.Write(JSONString(p.ContextMessage))
		b.WriteString(`}]`)
		sys = b.Bytes()
	}
	out, err := sjson.SetRawBytes(body, pathSystem, sys)
	if err != nil {
		return nil, fmt.Errorf("assembly: set system: %w", err)
	}
	if removedAny {
		name := func(v gjson.Result) (string, bool) { return messagesTool(v).Name, false }
		if out, err = filterTools(out, pathTools, kept, name, pathToolChoice); err != nil {
			return nil, err
		}
	}
	if p.DatamarkToolOutput {
		if out, err = DatamarkMessages(out); err != nil {
			return nil, err
		}
	}
	return removeExtension(out)
}
