package chat

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/surface"
)

// JSON paths of Chat Completions requests.
const (
	reqMessages      = "messages"
	reqTools         = "tools"
	reqFunctions     = "functions"
	reqToolChoice    = "tool_choice"
	reqFunctionCall  = "function_call"
	reqParallelCalls = "parallel_tool_calls"
	reqModel         = "model"
	reqStream        = "stream"
	// reqWebSearchOptions is Chat Completions' switch for the upstream's own web search: an object
	// (even {}) lets the model search the web with no tools entry.
	reqWebSearchOptions = "web_search_options"
)

// ToolWebSearch is the tool name under which Chat Completions' web_search_options is governed: the
// name of the Responses API's built-in web search tool, so that one allowlist entry, deny, kill
// switch or access policy covers both surfaces (and, through its aliases, web_search_preview).
const ToolWebSearch = "web_search"

// parse reads a validated Chat Completions body. Application are the texts of the client's system
// and developer messages, in order; the declared tools are the "tools" entries (function name,
// custom tool name, else the type), then legacy "functions", then ToolWebSearch when
// web_search_options is an object (unless a declared tool already has that name: then that tool
// stands for both, and web_search_options follows its fate); LatestUser is the text of the last
// user message.
func parse(b *assembly.Body) (surface.Request, error) {
	m := [6]gjson.Result{b.Get(reqModel), b.Get(reqStream), b.Get(reqMessages), b.Get(reqTools), b.Get(reqFunctions), b.Get(reqWebSearchOptions)}
	c := surface.Request{Model: m[0].String(), Stream: m[1].Type == gjson.True}
	msgs := m[2]
	if !msgs.IsArray() {
		return surface.Request{}, assembly.Invalid(reqMessages, "messages must be an array")
	}
	roles, err := b.Roles(reqMessages)
	if err != nil {
		return surface.Request{}, err
	}
	c.Application, c.LatestUser = roles.Application, roles.LatestUser
	if t := m[3]; t.Exists() && t.Type != gjson.Null {
		if !t.IsArray() {
			return surface.Request{}, assembly.Invalid(reqTools, "tools must be an array")
		}
		n := len(c.Tools)
		c.Tools = declared(t, false, make([]policy.Tool, 0, 4)) // most requests declare a few tools: one allocation
		c.NativeTools = c.NativeTools || len(c.Tools) > n
	}
	if f := m[4]; f.Exists() && f.Type != gjson.Null {
		if !f.IsArray() {
			return surface.Request{}, assembly.Invalid(reqFunctions, "functions must be an array")
		}
		n := len(c.Tools)
		c.Tools = declared(f, true, c.Tools)
		c.NativeTools = c.NativeTools || len(c.Tools) > n
	}
	switch ws := m[5]; {
	case ws.IsObject():
		c.Tools = withWebSearch(c.Tools)
	case ws.Exists() && ws.Type != gjson.Null:
		return surface.Request{}, assembly.Invalid(reqWebSearchOptions, "web_search_options must be an object (it turns on the upstream's web search, governed as the tool %q)", ToolWebSearch)
	}
	return c, nil
}

// declared appends the tools of arr, a "tools" array (legacy: "functions"), each entry read
// as chatTool reads it (legacy: functionTool), by one walk that goes down into each entry's
// function object where it is; where the walk cannot follow the body, by chatTool.
func declared(arr gjson.Result, legacy bool, tools []policy.Tool) []policy.Tool {
	n := len(tools)
	if readEntries(arr.Raw, 0, legacy, func(e entry, _, _ int) { tools = append(tools, e.tool()) }) >= 0 {
		return tools
	}
	return gjsonTools(arr, legacy, tools[:n])
}

// gjsonTools appends the tools of arr as gjson reads them, entry by entry (chatTool; legacy:
// functionTool): the reading declared's walk is held to, and its fallback.
func gjsonTools(arr gjson.Result, legacy bool, tools []policy.Tool) []policy.Tool {
	arr.ForEach(func(_, v gjson.Result) bool {
		if legacy {
			tools = append(tools, functionTool(v, true))
		} else {
			tools = append(tools, chatTool(v))
		}
		return true
	})
	return tools
}

// withWebSearch adds ToolWebSearch, with the other names of the built-in web search tool as
// aliases, to the declared tools: as a tool of its own, or onto a declared tool of that name, which
// then stands for both (one name, one decision).
func withWebSearch(tools []policy.Tool) []policy.Tool {
	aliases := assembly.BuiltinAliases(ToolWebSearch)
	for i := range tools {
		if tools[i].Name == ToolWebSearch {
			tools[i].Aliases = append(slices.Clip(tools[i].Aliases), aliases...)
			return tools
		}
	}
	return append(tools, policy.Tool{Name: ToolWebSearch, Aliases: aliases, UpstreamOnly: true})
}

// chatTool reads one "tools" entry: {"type":"function","function":{...}},
// {"type":"custom","custom":{...}}, or another type, which is governed by its type name.
func chatTool(v gjson.Result) policy.Tool {
	typ, fn, custom := toolParts(v)
	switch t := typ.String(); t {
	case "function", "":
		return functionTool(fn, true)
	case "custom":
		return functionTool(custom, false)
	default:
		return policy.Tool{Name: t}
	}
}

// chatToolName is the name chatTool gives a "tools" entry, read without its description and
// parameters: a function's name usually comes before its schema, which is then not read at all.
func chatToolName(v gjson.Result) string {
	typ, fn, custom := toolParts(v)
	switch t := typ.String(); t {
	case "function", "":
		return fn.Get("name").String()
	case "custom":
		return custom.Get("name").String()
	default:
		return t
	}
}

// toolParts are the type, function and custom members of a "tools" entry, read in one pass.
func toolParts(v gjson.Result) (typ, fn, custom gjson.Result) {
	v.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case "type":
			typ = val
		case "function":
			fn = val
		case "custom":
			custom = val
		}
		return true
	})
	return typ, fn, custom
}

// functionTool reads a function's (or a custom tool's) name, description and, with schema, its
// parameters, in one pass over the object.
func functionTool(v gjson.Result, schema bool) policy.Tool {
	var t policy.Tool
	v.ForEach(func(k, val gjson.Result) bool {
		switch k.Str {
		case "name":
			t.Name = val.String()
		case "description":
			t.Description = val.String()
		case "parameters":
			if schema {
				t.Schema = assembly.RawOrNil(val)
			}
		}
		return true
	})
	return t
}

// checkToolChoice checks tool_choice and legacy function_call against the kept tools. A choice
// naming a tool that is not kept, or "required" with nothing kept, is a 400
// tool_choice_not_allowed.
func checkToolChoice(b *assembly.Body, kept []policy.Tool) error {
	keptSet := make(map[string]bool, len(kept))
	for _, t := range kept {
		keptSet[t.Name] = true
	}
	notAllowed := func(param, format string, args ...any) error {
		return assembly.ToolChoiceError(param, format, args...)
	}
	choice := [2]gjson.Result{b.Get(reqToolChoice), b.Get(reqFunctionCall)}
	tc := choice[0]
	switch {
	case tc.Type == gjson.String:
		if tc.String() == "required" && len(kept) == 0 {
			return notAllowed(reqToolChoice, "tool_choice is \"required\" but no tool is allowed for this request")
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
				return notAllowed(reqToolChoice, "tool_choice requires a tool but no tool is allowed for this request")
			}
		default:
			names = append(names, chatTool(tc).Name)
		}
		for _, n := range names {
			if !keptSet[n] {
				return notAllowed(reqToolChoice, "tool_choice names tool %q, which is not allowed for this request", n)
			}
		}
	}
	fc := choice[1]
	if fc.IsObject() {
		if n := fc.Get("name").String(); !keptSet[n] {
			return notAllowed(reqFunctionCall, "function_call names function %q, which is not allowed for this request", n)
		}
	}
	return nil
}

// rewrite returns the upstream body: messages replaced by the layered system message (plus the
// context message in the structured channel) and the client's non-system messages in order; tools
// and functions filtered to the kept ones; the promptgate field removed. Every other byte stays as
// the client sent it: the edits are made by one executor (Body.Apply), in one new body.
//
// web_search_options reaches the upstream only where ToolWebSearch is kept, whether or not
// removedAny says a tool was removed: the upstream's web search never passes by default.
func rewrite(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	roles, err := b.Roles(reqMessages)
	if err != nil {
		return nil, err
	}
	msgs := b.Get(reqMessages)
	edits := make([]assembly.MemberEdit, 0, 6)
	edits = append(edits, assembly.MemberEdit{Key: reqMessages,
		Size: len(msgs.Raw) + p.SystemJSONSize() + len(p.ContextMessage) + len(p.ContextMessage)/8 + 128,
		Write: func(dst []byte) []byte {
			out := bytes.NewBuffer(dst)
			writeMessages(out, roles.Others, p)
			return out.Bytes()
		}})
	if removedAny {
		edits = append(edits, toolEdits(b, kept)...)
	}
	if b.Get(reqWebSearchOptions).IsObject() && !assembly.NameSet(kept)[ToolWebSearch] {
		edits = append(edits, assembly.MemberEdit{Key: reqWebSearchOptions, Delete: true})
	}
	edits = append(edits, assembly.MemberEdit{Key: assembly.PathExtension, Delete: true})
	out, err := b.Apply(edits)
	if err != nil {
		return nil, fmt.Errorf("chat: rewrite: %w", err)
	}
	if p.DatamarkToolOutput {
		return datamark(out)
	}
	return out, nil
}

// writeMessages writes the upstream messages array: the layered system message (plus the context
// message in the structured channel), then the client's messages other than system and developer
// (others), in order.
func writeMessages(b *bytes.Buffer, others []string, p assembly.Prompt) {
	b.WriteString(`[{"role":"system","content":`)
	b.Write(p.AppendSystemJSON(b.AvailableBuffer()))
	b.WriteByte('}')
	if p.ContextMessage != "" {
		b.WriteString(`,{"role":"system","content":`)
		assembly.WriteJSONString(b, p.ContextMessage)
		b.WriteByte('}')
	}
	for _, m := range others {
		b.WriteByte(',')
		b.WriteString(m)
	}
	b.WriteByte(']')
}

// toolEdits keeps, in "tools" and "functions", the first entry of each kept name (a name kept in
// both arrays stays in the first). An array left empty goes, with tool_choice and
// parallel_tool_calls or with function_call, which the API only accepts alongside it.
func toolEdits(b *assembly.Body, kept []policy.Tool) []assembly.MemberEdit {
	keptSet := assembly.NameSet(kept)
	used := map[string]bool{}
	var edits []assembly.MemberEdit
	for _, a := range [...]struct {
		key  string
		deps [2]string // "" for none
	}{
		{reqTools, [2]string{reqToolChoice, reqParallelCalls}},
		{reqFunctions, [2]string{reqFunctionCall}},
	} {
		arr := b.Get(a.key)
		if !arr.IsArray() {
			continue
		}
		var room [8]named
		keep := namedEntries(arr, a.key == reqFunctions, room[:0])
		keep = slices.DeleteFunc(keep, func(e named) bool {
			if !keptSet[e.name] || used[e.name] {
				return true
			}
			used[e.name] = true
			return false
		})
		if len(keep) > 0 {
			edits = append(edits, assembly.MemberEdit{Key: a.key, Raw: jsonArray(keep)})
			continue
		}
		for _, k := range [...]string{a.key, a.deps[0], a.deps[1]} {
			if k != "" {
				edits = append(edits, assembly.MemberEdit{Key: k, Delete: true})
			}
		}
	}
	return edits
}

// jsonArray is the JSON array of the entries' raw texts, in one allocation of its size.
func jsonArray(entries []named) []byte {
	size := 1 + len(entries)
	for _, e := range entries {
		size += len(e.raw)
	}
	out := append(make([]byte, 0, size), '[')
	for i, e := range entries {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, e.raw...)
	}
	return append(out, ']')
}

// named is an entry of a "tools" or "functions" array: the name its tool goes by, its raw text.
type named struct{ name, raw string }

// namedEntries appends to out the entries of arr, a "tools" array (legacy: "functions"), each named
// as chatToolName names it (legacy: its function's name), by one walk over arr; where the walk
// cannot follow the body, by gjson.
func namedEntries(arr gjson.Result, legacy bool, out []named) []named {
	n := len(out)
	s := arr.Raw
	if readEntries(s, 0, legacy, func(e entry, start, end int) { out = append(out, named{e.name(), s[start:end]}) }) >= 0 {
		return out
	}
	out = out[:n]
	arr.ForEach(func(_, v gjson.Result) bool {
		nm := chatToolName(v)
		if legacy {
			nm = v.Get("name").String()
		}
		out = append(out, named{nm, v.Raw})
		return true
	})
	return out
}

// datamark datamarks the content of every message with role "tool" or "function" of a chat body.
func datamark(body []byte) ([]byte, error) {
	var marks assembly.Marks
	i := 0
	gjson.GetBytes(body, reqMessages).ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").String() {
		case "tool", "function":
			marks.Content(reqMessages+"."+strconv.Itoa(i)+".content", m.Get("content"))
		}
		i++
		return true
	})
	return marks.Apply(body)
}
