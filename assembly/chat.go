package assembly

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
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
	// pathWebSearchOptions is Chat Completions' switch for the upstream's own web search: an object (even {})
	// lets the model search the web with no tools entry.
	pathWebSearchOptions = "web_search_options"
)

// ToolWebSearch is the tool name under which Chat Completions' web_search_options is governed: the name of
// the Responses API's built-in web search tool, so that one allowlist entry, deny, kill switch or access
// policy covers both surfaces (and, through its aliases, web_search_preview).
const ToolWebSearch = "web_search"

// Extension is the request's "promptgate" field.
type Extension struct {
	Protocol, Workflow, User, Conversation string
	// Context is the raw JSON of promptgate.context (untrusted data), nil when absent.
	Context []byte
}

// invalid returns a 400 for a request whose shape is wrong.
func invalid(param, format string, args ...any) *policy.Error {
	return &policy.Error{Code: policy.CodeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// ParseExtension reads the top-level "promptgate" field of any surface's body. Unknown keys and values of the
// wrong type are errors, so that a typo never silently weakens a request's policy.
func ParseExtension(body []byte) (Extension, error) { return NewBody(body).Extension() }

// Extension is ParseExtension of b.
func (b *Body) Extension() (Extension, error) {
	var x Extension
	f := b.get(PathExtension)
	if !f.Exists() {
		return x, nil
	}
	if !f.IsObject() {
		return x, invalid(PathExtension, "promptgate must be an object")
	}
	var err error
	b.extension(f, func(key string, v gjson.Result) bool {
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
				x.Context = rawOf(b.raw, v)
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
	// legacy "functions", then ToolWebSearch when web_search_options is an object (unless a declared tool
	// already has that name: then that tool stands for both, and web_search_options follows its fate).
	Tools []policy.Tool
	// NativeTools is true when the client declared tools or functions.
	NativeTools bool
	// LatestUser is the text of the last user message.
	LatestUser string
}

// ParseChat reads a validated Chat Completions body.
func ParseChat(body []byte) (*Chat, error) { return NewBody(body).Chat() }

// Chat is ParseChat of b.
func (b *Body) Chat() (*Chat, error) {
	m := [6]gjson.Result{b.get(pathModel), b.get(pathStream), b.get(pathMessages), b.get(pathTools), b.get(pathFunctions), b.get(pathWebSearchOptions)}
	c := &Chat{Model: m[0].String(), Stream: m[1].Type == gjson.True}
	msgs := m[2]
	if !msgs.IsArray() {
		return nil, invalid(pathMessages, "messages must be an array")
	}
	var err error
	if c.Application, c.LatestUser, err = roleTexts(msgs, pathMessages); err != nil {
		return nil, err
	}
	if t := m[3]; t.Exists() && t.Type != gjson.Null {
		if !t.IsArray() {
			return nil, invalid(pathTools, "tools must be an array")
		}
		t.ForEach(func(_, v gjson.Result) bool {
			c.Tools = append(c.Tools, chatTool(v))
			return true
		})
		c.NativeTools = c.NativeTools || len(t.Array()) > 0
	}
	if f := m[4]; f.Exists() && f.Type != gjson.Null {
		if !f.IsArray() {
			return nil, invalid(pathFunctions, "functions must be an array")
		}
		f.ForEach(func(_, v gjson.Result) bool {
			c.Tools = append(c.Tools, policy.Tool{Name: v.Get("name").String(), Description: v.Get("description").String(), Schema: rawOrNil(v.Get("parameters"))})
			return true
		})
		c.NativeTools = c.NativeTools || len(f.Array()) > 0
	}
	switch ws := m[5]; {
	case ws.IsObject():
		c.Tools = withWebSearch(c.Tools)
	case ws.Exists() && ws.Type != gjson.Null:
		return nil, invalid(pathWebSearchOptions, "web_search_options must be an object (it turns on the upstream's web search, governed as the tool %q)", ToolWebSearch)
	}
	return c, nil
}

// withWebSearch adds ToolWebSearch, with the other names of the built-in web search tool as aliases, to the
// declared tools: as a tool of its own, or onto a declared tool of that name, which then stands for both (one
// name, one decision).
func withWebSearch(tools []policy.Tool) []policy.Tool {
	aliases := builtinAliases(ToolWebSearch)
	for i := range tools {
		if tools[i].Name == ToolWebSearch {
			tools[i].Aliases = append(slices.Clip(tools[i].Aliases), aliases...)
			return tools
		}
	}
	return append(tools, policy.Tool{Name: ToolWebSearch, Aliases: aliases, UpstreamOnly: true})
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
func ChatToolChoice(body []byte, kept []policy.Tool) error { return NewBody(body).ChatToolChoice(kept) }

// ChatToolChoice is ChatToolChoice of b.
func (b *Body) ChatToolChoice(kept []policy.Tool) error {
	keptSet := make(map[string]bool, len(kept))
	for _, t := range kept {
		keptSet[t.Name] = true
	}
	notAllowed := func(param, format string, args ...any) error {
		return toolChoiceError(param, format, args...)
	}
	choice := [2]gjson.Result{b.get(pathToolChoice), b.get(pathFunctionCall)}
	tc := choice[0]
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
	fc := choice[1]
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
//
// The edits are spliced into one new body in one pass (the bytes are those sjson would give, edit by edit:
// see rewriteChatEdits); only a filter that empties an array takes the edit-by-edit path.
//
// web_search_options reaches the upstream only where ToolWebSearch is kept, whether or not removedAny says a
// tool was removed: the upstream's web search never passes by default.
func RewriteChat(body []byte, p Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	return NewBody(body).RewriteChat(p, kept, removedAny)
}

// RewriteChat is RewriteChat of b.
func (b *Body) RewriteChat(p Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	body := b.raw
	m := [5]gjson.Result{b.get(pathMessages), b.get(pathTools), b.get(pathFunctions), b.get(PathExtension), b.get(pathWebSearchOptions)}
	out, ok := rewriteChatSpliced(body, m, p, kept, removedAny)
	if !ok {
		var msgs bytes.Buffer
		writeMessages(&msgs, m[0], p)
		var err error
		if out, err = rewriteChatEdits(body, msgs.Bytes(), kept, removedAny); err != nil {
			return nil, err
		}
	}
	if p.DatamarkToolOutput {
		return DatamarkChat(out)
	}
	return out, nil
}

// writeMessages writes the upstream messages array: the layered system message (plus the context message
// in the structured channel), then the client's messages other than system and developer, in order.
func writeMessages(b *bytes.Buffer, msgsAt gjson.Result, p Prompt) {
	b.WriteString(`[{"role":"system","content":`)
	writeJSONString(b, p.System)
	b.WriteByte('}')
	if p.ContextMessage != "" {
		b.WriteString(`,{"role":"system","content":`)
		writeJSONString(b, p.ContextMessage)
		b.WriteByte('}')
	}
	msgsAt.ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").String() {
		case "system", "developer":
			return true
		}
		b.WriteByte(',')
		b.WriteString(m.Raw)
		return true
	})
	b.WriteByte(']')
}

// rewriteChatEdits applies the edits of RewriteChat one after the other with sjson, each copying the body.
func rewriteChatEdits(body, msgs []byte, kept []policy.Tool, removedAny bool) ([]byte, error) {
	out, err := sjson.SetRawBytes(body, pathMessages, msgs)
	if err != nil {
		return nil, fmt.Errorf("assembly: set messages: %w", err)
	}
	if removedAny {
		if out, err = filterToolArrays(out, kept); err != nil {
			return nil, err
		}
	}
	if get(out, pathWebSearchOptions).IsObject() && !nameSet(kept)[ToolWebSearch] {
		if out, err = sjson.DeleteBytes(out, pathWebSearchOptions); err != nil {
			return nil, fmt.Errorf("assembly: remove web_search_options: %w", err)
		}
	}
	if get(out, PathExtension).Exists() {
		if out, err = sjson.DeleteBytes(out, PathExtension); err != nil {
			return nil, fmt.Errorf("assembly: remove promptgate field: %w", err)
		}
	}
	return out, nil
}

// splice is one edit of a body: bytes [from, to) replaced by with, or by what write writes.
type splice struct {
	from, to int
	with     []byte
	write    func(*bytes.Buffer)
}

// rewriteChatSpliced makes the edits of rewriteChatEdits in one copy of the body: each top-level value is
// replaced where sjson would replace it, and the promptgate member (and a web_search_options that goes) is cut
// where sjson would cut it; two cuts that touch make the edits overlap, which falls back to rewriteChatEdits. ok is
// false when an edit is not a plain splice (messages absent, a tool array filtered to nothing), for
// rewriteChatEdits to do.
func rewriteChatSpliced(body []byte, m [5]gjson.Result, p Prompt, kept []policy.Tool, removedAny bool) ([]byte, bool) {
	msgsAt, ext, search := m[0], m[3], m[4]
	if msgsAt.Index <= 0 {
		return nil, false
	}
	edits := make([]splice, 0, 5)
	// The messages are written straight into the new body; room for the prompts and a little escaping.
	msgsSize := len(msgsAt.Raw) + len(p.System) + len(p.ContextMessage) + (len(p.System)+len(p.ContextMessage))/8 + 128
	edits = append(edits, splice{from: msgsAt.Index, to: msgsAt.Index + len(msgsAt.Raw),
		write: func(b *bytes.Buffer) { writeMessages(b, msgsAt, p) }})
	if removedAny {
		keptSet := make(map[string]bool, len(kept))
		for _, t := range kept {
			keptSet[t.Name] = true
		}
		used := map[string]bool{}
		for _, a := range []struct {
			arr  gjson.Result
			name func(gjson.Result) string
		}{
			{m[1], func(v gjson.Result) string { return chatTool(v).Name }},
			{m[2], func(v gjson.Result) string { return v.Get("name").String() }},
		} {
			arr := a.arr
			if !arr.IsArray() {
				continue
			}
			if arr.Index <= 0 {
				return nil, false
			}
			var b bytes.Buffer
			b.Grow(len(arr.Raw))
			b.WriteByte('[')
			n := 0
			arr.ForEach(func(_, v gjson.Result) bool {
				nm := a.name(v)
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
			if n == 0 {
				return nil, false // the array goes, with its companions: edit by edit
			}
			b.WriteByte(']')
			edits = append(edits, splice{from: arr.Index, to: arr.Index + len(arr.Raw), with: b.Bytes()})
		}
	}
	var dels []gjson.Result
	if ext.Exists() {
		dels = append(dels, ext)
	}
	if search.IsObject() && !nameSet(kept)[ToolWebSearch] {
		dels = append(dels, search)
	}
	for _, del := range dels {
		if del.Index <= 0 {
			return nil, false
		}
		from, to := deletedMember(body, del)
		edits = append(edits, splice{from: from, to: to})
	}
	slices.SortFunc(edits, func(a, b splice) int { return a.from - b.from })
	size := len(body) + msgsSize
	for i, e := range edits {
		if i > 0 && e.from < edits[i-1].to {
			return nil, false // overlapping edits cannot happen on distinct members; be safe
		}
		size += len(e.with) - (e.to - e.from)
	}
	out := bytes.NewBuffer(make([]byte, 0, size))
	at := 0
	for _, e := range edits {
		out.Write(body[at:e.from])
		if e.write != nil {
			e.write(out)
		} else {
			out.Write(e.with)
		}
		at = e.to
	}
	out.Write(body[at:])
	return out.Bytes(), true
}

// deletedMember is the span sjson.DeleteBytes removes for the top-level member whose value is v: back from
// the value over its key to the comma before it (or to just after the opening brace, and then on over the
// comma after the value).
func deletedMember(body []byte, v gjson.Result) (from, to int) {
	from, to = v.Index, v.Index+len(v.Raw)
	keepFrom, delNextComma := deleteTailItem(body[:v.Index])
	from = keepFrom
	if delNextComma {
		for i := to; i < len(body); i++ {
			if body[i] <= ' ' {
				continue
			}
			if body[i] == ',' {
				to = i + 1
			}
			break
		}
	}
	return from, to
}

// deleteTailItem is sjson's (v1.2.10) search back from a value for the start of its member: it returns
// the length of the prefix that stays, and whether the comma after the value must go too.
func deleteTailItem(buf []byte) (int, bool) {
loop:
	for i := len(buf) - 1; i >= 0; i-- {
		switch buf[i] {
		case '[':
			return len(buf), true
		case ',':
			return i, false
		case ':':
			i--
			for ; i >= 0; i-- {
				if buf[i] == '"' {
					i--
					for ; i >= 0; i-- {
						if buf[i] == '"' {
							i--
							if i >= 0 && buf[i] == '\\' {
								continue
							}
							for ; i >= 0; i-- {
								switch buf[i] {
								case '{':
									return i + 1, true
								case ',':
									return i, false
								}
							}
						}
					}
					break
				}
			}
			break loop
		}
	}
	return len(buf), false
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
		arr := get(body, path)
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
				if get(body, p).Exists() {
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
	writeJSONString(&b, s)
	return b.Bytes()
}

// writeJSONString writes s to b as JSON string, without HTML escaping, as encoding/json would.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}

// roleTexts reads an array of role-tagged messages (chat messages, Responses input items): the texts of
// its system and developer messages in order, and the text of its last user message. An element that is
// not an object is an invalid_request naming it as field[i].
func roleTexts(arr gjson.Result, field string) (application []string, latestUser string, err error) {
	i := 0
	arr.ForEach(func(_, m gjson.Result) bool {
		if !m.IsObject() {
			err = invalid(fmt.Sprintf("%s[%d]", field, i), "%s[%d] must be an object", field, i)
			return false
		}
		switch m.Get("role").String() {
		case "system", "developer":
			application = append(application, contentText(m.Get("content")))
		case "user":
			latestUser = contentText(m.Get("content"))
		}
		i++
		return true
	})
	return application, latestUser, err
}
