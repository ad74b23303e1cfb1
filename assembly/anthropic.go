package assembly

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy"
)

// JSON paths and names of Anthropic Messages bodies (/v1/messages).
const (
	pathSystem     = "system"
	pathMCPServers = "mcp_servers"
	typeMCPToolset = "mcp_toolset"
	// ToolMCP is the tool name under which Anthropic's MCP connector is governed: the request's mcp_servers and
	// the mcp_toolset entries of its tools, whatever the servers are called (as the Responses API's built-in
	// "mcp" type). The model calls such a server's tools through Anthropic, with no tool_use block to vet, so
	// the connector is allowed or removed as a whole.
	ToolMCP = "mcp"
)

// Messages is what assembly and policy need of an Anthropic /v1/messages request, read with gjson.
type Messages struct {
	Model  string
	Stream bool
	// Application is the client's own system: the string, or the text of each text block, in order.
	Application []string
	// Tools are the declared tools, each by its name (a client tool, or an Anthropic tool such as
	// {"type":"web_search_20250305","name":"web_search"}), or by its type when it has no name; the MCP
	// connector (mcp_servers, mcp_toolset entries) is one tool, ToolMCP.
	Tools []policy.Tool
	// NativeTools is true when the client declared tools.
	NativeTools bool
	// LatestUser is the text of the last user message.
	LatestUser string
}

// ParseMessages reads a validated Anthropic Messages body: messages must be an array of objects, system a
// string or an array of text blocks (or absent), tools an array.
func ParseMessages(body []byte) (*Messages, error) { return NewBody(body).Messages() }

// Messages is ParseMessages of b.
func (b *Body) Messages() (*Messages, error) {
	m := &Messages{Model: b.get(pathModel).String(), Stream: b.get(pathStream).Type == gjson.True}
	msgs := b.get(pathMessages)
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
	switch sys := b.get(pathSystem); {
	case sys.Type == gjson.String:
		if sys.Str != "" {
			m.Application = append(m.Application, sys.Str)
		}
	case sys.IsArray():
		i := 0
		sys.ForEach(func(_, blk gjson.Result) bool {
			if !blk.IsObject() || blk.Get("type").String() != "text" || blk.Get("text").Type != gjson.String {
				err = invalid(fmt.Sprintf("system[%d]", i), "system[%d] must be a text block", i)
				return false
			}
			m.Application = append(m.Application, blk.Get("text").Str)
			i++
			return true
		})
		if err != nil {
			return nil, err
		}
	case sys.Exists() && sys.Type != gjson.Null:
		return nil, invalid(pathSystem, "system must be a string or an array of text blocks")
	}
	hasMCP := false
	if t := b.get(pathTools); t.Exists() && t.Type != gjson.Null {
		if !t.IsArray() {
			return nil, invalid(pathTools, "tools must be an array")
		}
		t.ForEach(func(_, v gjson.Result) bool {
			m.NativeTools = true
			tool, mcp := messagesTool(v)
			if mcp {
				if hasMCP {
					return true
				}
				hasMCP = true
			}
			m.Tools = append(m.Tools, tool)
			return true
		})
	}
	switch srv := b.get(pathMCPServers); {
	case srv.IsArray():
		if len(srv.Array()) > 0 && !hasMCP {
			m.Tools = append(m.Tools, policy.Tool{Name: ToolMCP})
		}
	case srv.Exists() && srv.Type != gjson.Null:
		return nil, invalid(pathMCPServers, "mcp_servers must be an array")
	}
	return m, nil
}

// messagesTool reads one "tools" entry: a client tool {"name","description","input_schema"}, or an Anthropic
// tool ({"type":"bash_20250124","name":"bash"}, {"type":"web_search_20250305","name":"web_search"}), named by
// its name, else by its type. An mcp_toolset entry is ToolMCP whatever else it says (mcp is true).
func messagesTool(v gjson.Result) (t policy.Tool, mcp bool) {
	if v.Get("type").String() == typeMCPToolset {
		return policy.Tool{Name: ToolMCP}, true
	}
	name := v.Get("name").String()
	if name == "" {
		name = v.Get("type").String()
	}
	return policy.Tool{Name: name, Description: v.Get("description").String(), Schema: rawOrNil(v.Get("input_schema"))}, false
}

// MessagesToolChoice checks tool_choice against the kept tools: {"type":"tool","name":X} naming a tool that is
// not kept, or {"type":"any"} with nothing kept, is a 400 tool_choice_not_allowed.
func MessagesToolChoice(body []byte, kept []policy.Tool) error {
	return NewBody(body).MessagesToolChoice(kept)
}

// MessagesToolChoice is MessagesToolChoice of b.
func (b *Body) MessagesToolChoice(kept []policy.Tool) error {
	tc := b.get(pathToolChoice)
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
		name := func(v gjson.Result) (string, bool) {
			t, mcp := messagesTool(v)
			return t.Name, mcp
		}
		if out, err = filterTools(out, pathTools, kept, name, pathToolChoice); err != nil {
			return nil, err
		}
	}
	// The MCP connector reaches the upstream only where ToolMCP is kept (checked whether or not a removal was
	// reported: it must never pass by default).
	if srv := get(out, pathMCPServers); srv.IsArray() && len(srv.Array()) > 0 && !nameSet(kept)[ToolMCP] {
		if out, err = sjson.DeleteBytes(out, pathMCPServers); err != nil {
			return nil, fmt.Errorf("assembly: remove mcp_servers: %w", err)
		}
	}
	if p.DatamarkToolOutput {
		if out, err = DatamarkMessages(out); err != nil {
			return nil, err
		}
	}
	return removeExtension(out)
}

// RewriteMessages is RewriteMessages of b, on a copy of the body whose promptgate value is cut down to 0 (see
// withoutContext), so that the edits, each reading the body again, no longer read past the runtime context.
func (b *Body) RewriteMessages(p Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	return RewriteMessages(b.withoutContext(), p, kept, removedAny)
}
