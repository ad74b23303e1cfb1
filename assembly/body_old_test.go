package assembly

// The functions as they were before Body (commit 6795ed6, with the changes of the branch govern merged beside it), each looking its keys up in the body again: the
// reference FuzzBodyEqual compares the Body's answers with.

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy"
)

func oldMembers(body []byte, out []gjson.Result, keys ...string) {
	root := gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
	if !root.IsObject() {
		return
	}
	found := 0
	root.ForEach(func(k, v gjson.Result) bool {
		for i, key := range keys {
			if key == k.Str && !out[i].Exists() {
				out[i] = v
				found++
				break
			}
		}
		return found < len(keys)
	})
}

func oldParseExtension(body []byte) (Extension, error) {
	var x Extension
	f := get(body, PathExtension)
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
				x.Context = rawOf(body, v)
			}
		default:
			err = invalid(PathExtension+"."+key, "unknown field promptgate.%s; known: protocol, workflow, user, conversation, context", key)
		}
		return err == nil
	})
	return x, err
}

func oldParseChat(body []byte) (*Chat, error) {
	var m [6]gjson.Result
	oldMembers(body, m[:], pathModel, pathStream, pathMessages, pathTools, pathFunctions, pathWebSearchOptions)
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

func oldChatToolChoice(body []byte, kept []policy.Tool) error {
	keptSet := make(map[string]bool, len(kept))
	for _, t := range kept {
		keptSet[t.Name] = true
	}
	notAllowed := func(param, format string, args ...any) error {
		return &policy.Error{Code: "tool_choice_not_allowed", Param: param, Message: fmt.Sprintf(format, args...)}
	}
	var choice [2]gjson.Result
	oldMembers(body, choice[:], pathToolChoice, pathFunctionCall)
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

func oldRewriteChat(body []byte, p Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	var m [5]gjson.Result
	oldMembers(body, m[:], pathMessages, pathTools, pathFunctions, PathExtension, pathWebSearchOptions)
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

func oldParseResponses(body []byte) (*Responses, error) {
	r := &Responses{
		Model:              get(body, pathModel).String(),
		Stream:             get(body, pathStream).Type == gjson.True,
		PreviousResponseID: get(body, pathPreviousResponseID).String(),
	}
	switch ins := get(body, pathInstructions); {
	case ins.Type == gjson.String:
		if ins.Str != "" {
			r.Application = append(r.Application, ins.Str)
		}
	case ins.Exists() && ins.Type != gjson.Null:
		return nil, invalid(pathInstructions, "instructions must be a string")
	}
	switch in := get(body, pathInput); {
	case in.Type == gjson.String:
		r.LatestUser = in.Str
	case in.IsArray():
		app, user, err := roleTexts(in, pathInput)
		if err != nil {
			return nil, err
		}
		r.Application, r.LatestUser = append(r.Application, app...), user
	case in.Exists() && in.Type != gjson.Null:
		return nil, invalid(pathInput, "input must be a string or an array")
	}
	switch pr := get(body, pathPrompt); {
	case pr.IsObject():
		id := pr.Get("id")
		if id.Type != gjson.String || id.Str == "" {
			return nil, invalid(pathPrompt+".id", "prompt.id must be the stored prompt's id, a non-empty string")
		}
		r.StoredPrompt = id.Str
	case pr.Exists() && pr.Type != gjson.Null:
		return nil, invalid(pathPrompt, "prompt must be an object naming a stored prompt ({\"id\":\"pmpt_...\"})")
	}
	if t := get(body, pathTools); t.Exists() && t.Type != gjson.Null {
		if !t.IsArray() {
			return nil, invalid(pathTools, "tools must be an array")
		}
		seenBuiltin := map[string]bool{}
		t.ForEach(func(_, v gjson.Result) bool {
			tool, builtin := responsesTool(v)
			if builtin {
				if seenBuiltin[tool.Name] {
					return true
				}
				seenBuiltin[tool.Name] = true
			}
			r.Tools = append(r.Tools, tool)
			r.NativeTools = true
			return true
		})
	}
	return r, nil
}

func oldResponsesToolChoice(body []byte, kept []policy.Tool) error {
	keptSet := nameSet(kept)
	tc := get(body, pathToolChoice)
	switch {
	case tc.Type == gjson.String:
		if tc.Str == "required" && len(kept) == 0 {
			return toolChoiceError(pathToolChoice, "tool_choice is \"required\" but no tool is allowed for this request")
		}
	case tc.IsObject():
		var names []string
		switch tc.Get("type").String() {
		case "allowed_tools":
			tc.Get("tools").ForEach(func(_, t gjson.Result) bool {
				tool, _ := responsesTool(t)
				names = append(names, tool.Name)
				return true
			})
			if tc.Get("mode").String() == "required" && len(kept) == 0 {
				return toolChoiceError(pathToolChoice, "tool_choice requires a tool but no tool is allowed for this request")
			}
		default:
			tool, _ := responsesTool(tc)
			names = append(names, tool.Name)
		}
		for _, n := range names {
			if !keptSet[n] {
				return toolChoiceError(pathToolChoice, "tool_choice names tool %q, which is not allowed for this request", n)
			}
		}
	}
	return nil
}

func oldParseMessages(body []byte) (*Messages, error) {
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
	hasMCP := false
	if t := get(body, pathTools); t.Exists() && t.Type != gjson.Null {
		if !t.IsArray() {
			return nil, invalid(pathTools, "tools must be an array")
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
			return nil, err
		}
	}
	switch srv := get(body, pathMCPServers); {
	case srv.IsArray():
		if len(srv.Array()) > 0 && !hasMCP {
			m.Tools = append(m.Tools, policy.Tool{Name: ToolMCP})
		}
	case srv.Exists() && srv.Type != gjson.Null:
		return nil, invalid(pathMCPServers, "mcp_servers must be an array")
	}
	return m, nil
}

func oldMessagesToolChoice(body []byte, kept []policy.Tool) error {
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
