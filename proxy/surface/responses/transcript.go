package responses

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/proxy/surface"
)

// transcript reads a Responses body for the information-flow rules: the history this instance
// relayed up to the response it continues (previous_response_id, from its record), instructions,
// then input (a string or items). Where the history is out of sight — a link of the chain not in
// the record, a conversation object, an item_reference — the transcript says so (unseen) and the
// rules fail closed.
func (s *Surface) transcript(b *assembly.Body) (*flow.Transcript, error) {
	t := flow.NewTranscript()
	prev := b.Get(reqPreviousResponseID)
	if prev.Type == gjson.String && prev.Str != "" {
		if h := s.history.chain(prev.Str); h != nil {
			t.History(true)
			readItems(t, gjson.ParseBytes(h))
			t.History(false)
		} else {
			t.SetUnseen("previous_response_id")
		}
	} else if conv := b.Get("conversation"); conv.Exists() && conv.Type != gjson.Null {
		t.SetUnseen("conversation")
	}
	if ins := b.Get("instructions"); ins.Type == gjson.String && ins.Str != "" {
		t.Text(flow.RoleApp, ins.Str, -1)
	}
	switch in := b.Get("input"); {
	case in.Type == gjson.String:
		t.Text(flow.RoleUser, in.Str, 0)
	case in.IsArray():
		readItems(t, in)
	case in.Exists() && in.Type != gjson.Null:
		return nil, assembly.Invalid("input", "input must be a string or an array")
	}
	return t, nil
}

// builtinTool names the tool of a built-in item type, as the allowlist governs it.
func builtinTool(typ string) string {
	switch typ {
	case "web_search_call":
		return "web_search"
	case "file_search_call":
		return "file_search"
	case "computer_call", "computer_call_output":
		return "computer_use_preview"
	case "code_interpreter_call":
		return "code_interpreter"
	case "image_generation_call":
		return "image_generation"
	case "local_shell_call", "local_shell_call_output":
		return "local_shell"
	case "shell_call", "shell_call_output":
		return "shell"
	case "apply_patch_call", "apply_patch_call_output":
		return "apply_patch"
	case "mcp_call", "mcp_list_tools":
		return "mcp"
	}
	return ""
}

// readItems reads an array of items: messages, function and custom tool calls and their outputs,
// built-in tool items (a call, and the output it carries or that answers it), MCP calls and tool
// lists by server.
func readItems(t *flow.Transcript, arr gjson.Result) {
	i := 0
	arr.ForEach(func(_, it gjson.Result) bool {
		readItem(t, it, i)
		i++
		return true
	})
}

func readItem(t *flow.Transcript, it gjson.Result, i int) {
	typ := it.Get("type").String()
	switch typ {
	case "", "message":
		switch it.Get("role").String() {
		case "system", "developer":
			surface.AddMessage(t, flow.RoleApp, it.Get("content"), i)
		case "user":
			surface.AddMessage(t, flow.RoleUser, it.Get("content"), i)
		case "assistant":
			surface.AddMessage(t, flow.RoleAssistant, it.Get("content"), i)
		default:
			t.Untrusted(surface.JSONText(it, false), i)
		}
	case typeFunction:
		t.Call(it.Get("name").String(), it.Get("call_id").String(), []byte(it.Get("arguments").String()), "", i)
	case typeCustomTool:
		t.Call(it.Get("name").String(), it.Get("call_id").String(), surface.RawJSON(it.Get("input")), "", i)
	case "function_call_output", "custom_tool_call_output", "computer_call_output", "local_shell_call_output",
		"shell_call_output", "apply_patch_call_output":
		t.Output(it.Get("call_id").String(), surface.OutputOf(it.Get("output")), i)
	case "reasoning", "mcp_approval_request", "mcp_approval_response":
	case "item_reference":
		t.SetUnseen("item_reference")
	case "mcp_call", "mcp_list_tools":
		readMCPItem(t, it, typ, i)
	default:
		tool := builtinTool(typ)
		if tool == "" {
			t.Untrusted(surface.JSONText(it, false), i) // unknown: untrusted
			return
		}
		id := it.Get("call_id").String()
		if id == "" {
			id = it.Get("id").String()
		}
		t.Call(tool, id, nil, "", i)
		switch typ {
		case "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call":
			// These items carry their own results (or stand for results read upstream, unseen).
			t.ToolOutput(tool, carried(it, "results", "outputs", "output", "error"), i)
		}
	}
}

// readMCPItem reads an MCP item, which carries its own output: a call (tool "mcp", as the allowlist
// governs the connector) with its arguments and output, or a server's tool list. Its output is the
// source mcp:SERVER_LABEL.
func readMCPItem(t *flow.Transcript, it gjson.Result, typ string, i int) {
	server := it.Get("server_label").String()
	if server == "" {
		server = "?"
	}
	if typ == "mcp_call" {
		t.Call("mcp", it.Get("id").String(), []byte(it.Get("arguments").String()), server, i)
		out := carried(it, "output", "error")
		out.Server = server
		t.ToolOutput("mcp", out, i)
		return
	}
	out := carried(it, "tools", "error")
	out.Server = server
	t.ToolOutput("mcp", out, i)
}

// carried is the output an item carries under the given keys.
func carried(it gjson.Result, keys ...string) flow.Output {
	var texts, docs []string
	for _, k := range keys {
		if v := it.Get(k); v.Exists() {
			texts = append(texts, surface.JSONText(v, false))
			if v.Type == gjson.String {
				docs = append(docs, v.Str)
			}
		}
	}
	return flow.Output{Text: strings.Join(texts, "\n"), Doc: strings.Join(docs, "\n")}
}

// userTexts calls each with the user's texts of a body, and their paths: an input that is a
// string, and the texts of the user messages among its input items.
func userTexts(body []byte, each func(path string, text gjson.Result)) {
	in := gjson.GetBytes(body, "input")
	if in.Type == gjson.String {
		each("input", in)
		return
	}
	i := 0
	in.ForEach(func(_, it gjson.Result) bool {
		if typ := it.Get("type").String(); (typ == "" || typ == "message") && it.Get("role").String() == "user" {
			surface.ContentTexts(it.Get("content"), "input."+strconv.Itoa(i)+".content", each)
		}
		i++
		return true
	})
}
