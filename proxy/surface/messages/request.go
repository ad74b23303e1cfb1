package messages

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/surface"
)

// JSON paths and names of Anthropic Messages requests (/v1/messages).
const (
	reqModel       = "model"
	reqStream      = "stream"
	reqMessages    = "messages"
	reqTools       = "tools"
	reqToolChoice  = "tool_choice"
	reqSystem      = "system"
	reqMCPServers  = "mcp_servers"
	typeMCPToolset = "mcp_toolset"
	// typeCustom is the type of a client tool (as no type at all); every other type is an
	// Anthropic-defined tool.
	typeCustom = "custom"
	// ToolMCP is the tool name under which Anthropic's MCP connector is governed: the request's
	// mcp_servers and the mcp_toolset entries of its tools, whatever the servers are called (as the
	// Responses API's built-in "mcp" type). The model calls such a server's tools through
	// Anthropic, with no tool_use block to vet, so the connector is allowed or removed as a whole.
	ToolMCP = "mcp"
)

// parse reads a validated Anthropic Messages body: messages must be an array of objects, system a
// string or an array of text blocks (or absent), tools an array. Application is the client's own
// system: the string, or the text of each text block, in order. Tools are declared each by its name
// (a client tool, or an Anthropic tool such as {"type":"web_search_20250305","name":"web_search"}),
// or by its type when it has no name; the MCP connector (mcp_servers, mcp_toolset entries) is one
// tool, ToolMCP.
func parse(b *assembly.Body) (surface.Request, error) {
	m := surface.Request{Model: b.Get(reqModel).String(), Stream: b.Get(reqStream).Type == gjson.True}
	msgs := b.Get(reqMessages)
	if !msgs.IsArray() {
		return surface.Request{}, assembly.Invalid(reqMessages, "messages must be an array")
	}
	var err error
	i := 0
	msgs.ForEach(func(_, msg gjson.Result) bool {
		if !msg.IsObject() {
			err = assembly.Invalid(fmt.Sprintf("messages[%d]", i), "messages[%d] must be an object", i)
			return false
		}
		if msg.Get("role").String() == "user" {
			m.LatestUser = assembly.ContentText(msg.Get("content"))
		}
		i++
		return true
	})
	if err != nil {
		return surface.Request{}, err
	}
	switch sys := b.Get(reqSystem); {
	case sys.Type == gjson.String:
		if sys.Str != "" {
			m.Application = append(m.Application, sys.Str)
		}
	case sys.IsArray():
		i := 0
		sys.ForEach(func(_, blk gjson.Result) bool {
			if !blk.IsObject() || blk.Get("type").String() != "text" || blk.Get("text").Type != gjson.String {
				err = assembly.Invalid(fmt.Sprintf("system[%d]", i), "system[%d] must be a text block", i)
				return false
			}
			m.Application = append(m.Application, blk.Get("text").Str)
			i++
			return true
		})
		if err != nil {
			return surface.Request{}, err
		}
	case sys.Exists() && sys.Type != gjson.Null:
		return surface.Request{}, assembly.Invalid(reqSystem, "system must be a string or an array of text blocks")
	}
	hasMCP := false
	if t := b.Get(reqTools); t.Exists() && t.Type != gjson.Null {
		if !t.IsArray() {
			return surface.Request{}, assembly.Invalid(reqTools, "tools must be an array")
		}
		i := 0
		t.ForEach(func(_, v gjson.Result) bool {
			if err = anthropicToolName(v, i); err != nil {
				return false
			}
			i++
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
		if err != nil {
			return surface.Request{}, err
		}
	}
	switch srv := b.Get(reqMCPServers); {
	case srv.IsArray():
		if len(srv.Array()) > 0 && !hasMCP {
			m.Tools = append(m.Tools, policy.Tool{Name: ToolMCP})
		}
	case srv.Exists() && srv.Type != gjson.Null:
		return surface.Request{}, assembly.Invalid(reqMCPServers, "mcp_servers must be an array")
	}
	return m, nil
}

// messagesTool reads one "tools" entry: a client tool {"name","description","input_schema"} (no
// type, or "custom") by its name, else by its type; an Anthropic tool
// ({"type":"bash_20250124","name":"bash"}, {"type":"web_search_20250305","name":"web_search"}) by
// its name, else by the name Anthropic gives its type, with the type and the type's other names as
// aliases (a deny, kill switch or access policy of any of them removes it). An mcp_toolset entry is
// ToolMCP whatever else it says (mcp is true). parse has refused an Anthropic tool whose name is
// not its type's (anthropicToolName).
func messagesTool(v gjson.Result) (t policy.Tool, mcp bool) {
	typ := v.Get("type").String()
	if typ == typeMCPToolset {
		return policy.Tool{Name: ToolMCP}, true
	}
	t = policy.Tool{Name: v.Get("name").String(), Description: v.Get("description").String(), Schema: assembly.RawOrNil(v.Get("input_schema"))}
	if typ == "" || typ == typeCustom {
		if t.Name == "" {
			t.Name = typ
		}
		return t, false
	}
	names := anthropicTypeNames(typ)
	if t.Name == "" {
		t.Name = names[0]
	}
	for _, n := range append(names, typ) {
		if n != t.Name && !slices.Contains(t.Aliases, n) {
			t.Aliases = append(t.Aliases, n)
		}
	}
	return t, false
}

// anthropicToolName checks the name of the tools entry at index i: an Anthropic-defined tool (any
// type but none, "custom" and "mcp_toolset") that carries a name must carry the one Anthropic fixes
// for its type (anthropicTypeNames). Otherwise a server tool could pass for an allowed client tool
// ({"type":"web_search_20250305","name":"get_weather"} governed as get_weather), so it is a 400
// naming tools[i].name. The SDKs send these names as constants; a client that leaves the name out
// is governed by the type's name.
func anthropicToolName(v gjson.Result, i int) error {
	typ := v.Get("type")
	if !typ.Exists() || typ.Type == gjson.Null {
		return nil
	}
	switch typ.String() {
	case "", typeCustom, typeMCPToolset:
		return nil
	}
	name := v.Get("name")
	if !name.Exists() {
		return nil
	}
	names := anthropicTypeNames(typ.String())
	if name.Type == gjson.String && slices.Contains(names, name.Str) {
		return nil
	}
	param := fmt.Sprintf("tools[%d].name", i)
	return assembly.Invalid(param, "%s: Anthropic names its tool of type %q %q, not %s; promptgate governs a tool by its name, so a "+
		"tool of this type may only carry that name (or none)", param, typ.String(), strings.Join(names, `" or "`), name.Raw)
}

// anthropicTypeNames are the names Anthropic fixes for the tool of an Anthropic-defined type, as
// its SDKs declare them (anthropic-sdk-go v2.17.0): the type without its _YYYYMMDD version
// (web_search_20250305 is web_search, bash_20250124 bash, code_execution_20250825 code_execution,
// computer_20251124 computer, memory_20250818 memory, web_fetch_20250910 web_fetch,
// tool_search_tool_bm25_20251119 tool_search_tool_bm25; an unversioned type is its own name),
// except the text editor: str_replace_editor up to text_editor_20250124,
// str_replace_based_edit_tool from text_editor_20250429, and either name for a later version not
// known here.
func anthropicTypeNames(typ string) []string {
	switch typ {
	case "text_editor_20241022", "text_editor_20250124":
		return []string{"str_replace_editor"}
	case "text_editor_20250429", "text_editor_20250728":
		return []string{"str_replace_based_edit_tool"}
	}
	base := typ
	if n := len(typ) - len("_20060102"); n > 0 && isCompactDate(typ[n:]) {
		base = typ[:n]
	}
	if base == "text_editor" {
		return []string{"str_replace_based_edit_tool", "str_replace_editor"}
	}
	return []string{base}
}

// isCompactDate reports whether s is "_YYYYMMDD".
func isCompactDate(s string) bool {
	if len(s) != len("_20060102") || s[0] != '_' {
		return false
	}
	for _, c := range []byte(s[1:]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// checkToolChoice checks tool_choice against the kept tools: {"type":"tool","name":X} naming a tool
// that is not kept, or {"type":"any"} with nothing kept, is a 400 tool_choice_not_allowed.
func checkToolChoice(b *assembly.Body, kept []policy.Tool) error {
	tc := b.Get(reqToolChoice)
	if !tc.IsObject() {
		return nil
	}
	switch tc.Get("type").String() {
	case "any":
		if len(kept) == 0 {
			return assembly.ToolChoiceError(reqToolChoice, "tool_choice is \"any\" but no tool is allowed for this request")
		}
	case "tool":
		if n := tc.Get("name").String(); !assembly.NameSet(kept)[n] {
			return assembly.ToolChoiceError(reqToolChoice, "tool_choice names tool %q, which is not allowed for this request", n)
		}
	}
	return nil
}

// rewrite returns the upstream body of a /v1/messages request: system replaced by the layered
// prompt as one string (which holds the client's own system as APPLICATION INSTRUCTIONS;
// cache_control of the client's system blocks is not kept) — or, in the structured channel, by two
// text blocks, the layered prompt and the context block; tools filtered to the kept ones; the
// promptgate field removed. Messages and every other byte stay as the client sent them.
//
// The edits are made by one executor (Body.Apply), in one new body. The MCP connector (mcp_servers)
// reaches the upstream only where ToolMCP is kept (checked whether or not a removal was reported:
// it must never pass by default).
func rewrite(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	edits := make([]assembly.MemberEdit, 0, 5)
	size := p.SystemJSONSize()
	if p.ContextMessage != "" {
		size += len(`[{"type":"text","text":},{"type":"text","text":}]`) + len(p.ContextMessage) + len(p.ContextMessage)/8 + 2
	}
	edits = append(edits, assembly.MemberEdit{Key: reqSystem, Size: size, Write: func(dst []byte) []byte { return appendSystem(dst, &p) }})
	if removedAny { // the tools are looked up only when some went
		edits = append(edits, assembly.ToolsEdits(b, reqTools, kept, toolName, reqToolChoice)...)
	}
	if srv := b.Get(reqMCPServers); srv.IsArray() && len(srv.Array()) > 0 && !slices.ContainsFunc(kept, isMCP) {
		edits = append(edits, assembly.MemberEdit{Key: reqMCPServers, Delete: true})
	}
	edits = append(edits, assembly.MemberEdit{Key: assembly.PathExtension, Delete: true})
	out, err := b.Apply(edits)
	if err != nil {
		return nil, fmt.Errorf("messages: rewrite: %w", err)
	}
	if p.DatamarkToolOutput {
		return datamark(out)
	}
	return out, nil
}

// appendSystem appends the upstream system value: the layered prompt as a string, or, in the
// structured channel, the text blocks of the layered prompt and of the context.
func appendSystem(dst []byte, p *assembly.Prompt) []byte {
	if p.ContextMessage == "" {
		return p.AppendSystemJSON(dst)
	}
	dst = append(dst, `[{"type":"text","text":`...)
	dst = p.AppendSystemJSON(dst)
	dst = append(dst, `},{"type":"text","text":`...)
	dst = assembly.AppendJSONString(dst, p.ContextMessage)
	return append(dst, `}]`...)
}

// toolName is the name a tools entry is governed by, and whether it is one of the shared
// mcp_toolset entries (assembly.KeptTools).
func toolName(v gjson.Result) (string, bool) {
	t, mcp := messagesTool(v)
	return t.Name, mcp
}

// isMCP reports whether t is the MCP connector.
func isMCP(t policy.Tool) bool { return t.Name == ToolMCP }

// datamark datamarks the content of every tool_result block of an Anthropic Messages body.
func datamark(body []byte) ([]byte, error) {
	var marks assembly.Marks
	i := 0
	gjson.GetBytes(body, reqMessages).ForEach(func(_, m gjson.Result) bool {
		if c := m.Get("content"); c.IsArray() {
			j := 0
			c.ForEach(func(_, block gjson.Result) bool {
				if block.Get("type").String() == "tool_result" {
					marks.Content(reqMessages+"."+strconv.Itoa(i)+".content."+strconv.Itoa(j)+".content", block.Get("content"))
				}
				j++
				return true
			})
		}
		i++
		return true
	})
	return marks.Apply(body)
}
