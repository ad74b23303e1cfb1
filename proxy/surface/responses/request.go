package responses

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

// JSON paths of OpenAI Responses API requests (/v1/responses).
const (
	reqModel              = "model"
	reqStream             = "stream"
	reqTools              = "tools"
	reqToolChoice         = "tool_choice"
	reqInstructions       = "instructions"
	reqInput              = "input"
	reqPreviousResponseID = "previous_response_id"
	// reqPrompt is a stored prompt ({"id":"pmpt_...","version":...,"variables":...}): instructions
	// and tools kept upstream, which promptgate never sees.
	reqPrompt = "prompt"
)

// parse reads a validated Responses API body. instructions must be a string (or null), input a
// string or an array of objects (or absent), tools an array, prompt an object with a string id (or
// null). Application holds the client's own instructions, then the texts of its system and
// developer input items, in order; a function or custom tool is declared by its name, a built-in
// tool (web_search, file_search, code_interpreter, mcp, ...) by its type, and several entries of
// one built-in type (two mcp servers, say) are one tool: only the first is listed, and the others
// follow its fate. LatestUser is the text of the last user input item, or the input itself when it
// is a string.
func parse(b *assembly.Body) (surface.Request, error) {
	r := surface.Request{
		Model:  b.Get(reqModel).String(),
		Stream: b.Get(reqStream).Type == gjson.True,
	}
	switch ins := b.Get(reqInstructions); {
	case ins.Type == gjson.String:
		if ins.Str != "" {
			r.Application = append(r.Application, ins.Str)
		}
	case ins.Exists() && ins.Type != gjson.Null:
		return surface.Request{}, assembly.Invalid(reqInstructions, "instructions must be a string")
	}
	switch in := b.Get(reqInput); {
	case in.Type == gjson.String:
		r.LatestUser = in.Str
	case in.IsArray():
		roles, err := b.Roles(reqInput)
		if err != nil {
			return surface.Request{}, err
		}
		r.Application, r.LatestUser = append(r.Application, roles.Application...), roles.LatestUser
	case in.Exists() && in.Type != gjson.Null:
		return surface.Request{}, assembly.Invalid(reqInput, "input must be a string or an array")
	}
	switch pr := b.Get(reqPrompt); {
	case pr.IsObject():
		id := pr.Get("id")
		if id.Type != gjson.String || id.Str == "" {
			return surface.Request{}, assembly.Invalid(reqPrompt+".id", "prompt.id must be the stored prompt's id, a non-empty string")
		}
		r.StoredPrompt = id.Str
	case pr.Exists() && pr.Type != gjson.Null:
		return surface.Request{}, assembly.Invalid(reqPrompt, "prompt must be an object naming a stored prompt ({\"id\":\"pmpt_...\"})")
	}
	if t := b.Get(reqTools); t.Exists() && t.Type != gjson.Null {
		if !t.IsArray() {
			return surface.Request{}, assembly.Invalid(reqTools, "tools must be an array")
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

// responsesTool reads one "tools" entry of a Responses body:
// {"type":"function","name":...,"parameters":...}, {"type":"custom","name":...}, or a built-in
// tool, which is governed by its type name (builtin is true).
func responsesTool(v gjson.Result) (t policy.Tool, builtin bool) {
	switch typ := v.Get("type").String(); typ {
	case "function", "":
		return policy.Tool{Name: v.Get("name").String(), Description: v.Get("description").String(), Schema: assembly.RawOrNil(v.Get("parameters"))}, false
	case "custom":
		return policy.Tool{Name: v.Get("name").String(), Description: v.Get("description").String()}, false
	default:
		return policy.Tool{Name: typ, Aliases: assembly.BuiltinAliases(typ)}, true
	}
}

// checkToolChoice checks tool_choice against the kept tools: "required" with nothing kept, or a
// choice naming a tool that is not kept ({"type":"function","name":X}, {"type":"custom","name":X},
// a built-in type such as {"type":"web_search_preview"} or {"type":"mcp",...}, or an entry of
// {"type":"allowed_tools", "tools":[...]}), is a 400 tool_choice_not_allowed.
func checkToolChoice(b *assembly.Body, kept []policy.Tool) error {
	keptSet := assembly.NameSet(kept)
	tc := b.Get(reqToolChoice)
	switch {
	case tc.Type == gjson.String:
		if tc.Str == "required" && len(kept) == 0 {
			return assembly.ToolChoiceError(reqToolChoice, "tool_choice is \"required\" but no tool is allowed for this request")
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
				return assembly.ToolChoiceError(reqToolChoice, "tool_choice requires a tool but no tool is allowed for this request")
			}
		default:
			tool, _ := responsesTool(tc)
			names = append(names, tool.Name)
		}
		for _, n := range names {
			if !keptSet[n] {
				return assembly.ToolChoiceError(reqToolChoice, "tool_choice names tool %q, which is not allowed for this request", n)
			}
		}
	}
	return nil
}

// rewrite returns the upstream body of a /v1/responses request: instructions replaced by the
// layered prompt (which holds the client's instructions and system/developer input items as
// APPLICATION INSTRUCTIONS), those input items removed from an input array (a string input stays as
// it is), tools filtered to the kept ones, the promptgate field removed. Every other byte —
// previous_response_id, conversation, store, unknown fields — stays as the client sent it.
//
// The runtime context always stays in instructions: input items are stored with the conversation
// (previous_response_id), so a per-turn context item there would pile up in later turns. Callers
// build p without the structured channel.
//
// The edits are made by one executor (Body.Apply), in one new body.
func rewrite(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error) {
	edits := make([]assembly.MemberEdit, 0, 5)
	edits = append(edits, assembly.MemberEdit{Key: reqInstructions, Size: p.SystemJSONSize(), Write: p.AppendSystemJSON})
	if in := b.Get(reqInput); in.IsArray() {
		if others, dropped := inputOthers(b, in); dropped { // a system or developer item goes
			edits = append(edits, assembly.MemberEdit{Key: reqInput, Raw: relay.JoinArray(others)})
		}
	}
	if removedAny { // the tools are looked up only when some went
		edits = append(edits, assembly.ToolsEdits(b, reqTools, kept, toolName, reqToolChoice)...)
	}
	edits = append(edits, assembly.MemberEdit{Key: assembly.PathExtension, Delete: true})
	out, err := b.Apply(edits)
	if err != nil {
		return nil, fmt.Errorf("responses: rewrite: %w", err)
	}
	if p.VetHostedMCP {
		if out, err = approveAlways(out); err != nil {
			return nil, fmt.Errorf("responses: rewrite: %w", err)
		}
		if out, err = denyClientApprovals(out); err != nil {
			return nil, fmt.Errorf("responses: rewrite: %w", err)
		}
	}
	if p.DatamarkToolOutput {
		return datamark(out)
	}
	return out, nil
}

// approveAlways makes every hosted MCP tool of an upstream body (tools entries of type mcp) ask for
// approval of every call: require_approval "always", whatever the client sent.
func approveAlways(body []byte) ([]byte, error) {
	var err error
	i := 0
	gjson.GetBytes(body, reqTools).ForEach(func(_, v gjson.Result) bool {
		if strings.EqualFold(v.Get("type").String(), hostedMCP) { // as a case-insensitive upstream reads it
			body, err = sjson.SetBytes(body, reqTools+"."+strconv.Itoa(i)+".require_approval", "always")
		}
		i++
		return err == nil
	})
	return body, err
}

// reasonClientApproval is the reason of a client's approval of a hosted MCP call, made a denial.
const reasonClientApproval = "[promptgate] hosted MCP calls are approved by promptgate only (mcp.vetHostedCalls)"

// denyClientApprovals makes every approval a client sends of a hosted MCP call (an input item of
// type mcp_approval_response, in any letter case) a denial: under vetHostedCalls only promptgate
// approves, and the client never sees an approval request, so one it approves is one promptgate
// left unanswered (found in a conversation object promptgate does not follow) or one it wrote.
func denyClientApprovals(body []byte) ([]byte, error) {
	var err error
	i := 0
	gjson.GetBytes(body, reqInput).ForEach(func(_, it gjson.Result) bool {
		if strings.EqualFold(it.Get("type").String(), "mcp_approval_response") && it.Get("approve").Type != gjson.False {
			at := reqInput + "." + strconv.Itoa(i)
			if body, err = sjson.SetBytes(body, at+".approve", false); err == nil {
				body, err = sjson.SetBytes(body, at+".reason", reasonClientApproval)
			}
		}
		i++
		return err == nil
	})
	return body, err
}

// inputOthers are the input items other than system and developer messages, and whether any was
// left out: the roles parse read (Body.Roles), else, for items it does not take, each item's role.
func inputOthers(b *assembly.Body, in gjson.Result) (others []string, dropped bool) {
	if roles, err := b.Roles(reqInput); err == nil {
		return roles.Others, len(roles.Application) > 0
	}
	in.ForEach(func(_, item gjson.Result) bool {
		switch item.Get("role").String() {
		case "system", "developer":
			dropped = true
		default:
			others = append(others, item.Raw)
		}
		return true
	})
	return others, dropped
}

// toolName is the name a tools entry is governed by, and whether it is a built-in tool, whose
// entries of one type are shared (assembly.KeptTools).
func toolName(v gjson.Result) (string, bool) {
	t, builtin := responsesTool(v)
	return t.Name, builtin
}

// datamark datamarks the output of every function_call_output and custom_tool_call_output input
// item of a Responses body (a string input holds none).
func datamark(body []byte) ([]byte, error) {
	var marks assembly.Marks
	i := 0
	in := gjson.GetBytes(body, reqInput)
	if !in.IsArray() {
		return body, nil
	}
	in.ForEach(func(_, item gjson.Result) bool {
		switch item.Get("type").String() {
		case "function_call_output", "custom_tool_call_output":
			marks.Content(reqInput+"."+strconv.Itoa(i)+".output", item.Get("output"))
		}
		i++
		return true
	})
	return marks.Apply(body)
}
