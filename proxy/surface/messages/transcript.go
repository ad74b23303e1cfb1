package messages

import (
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/proxy/surface"
)

// transcript reads an Anthropic Messages body for the information-flow rules: system, then messages
// whose content is a string or blocks (text, tool_use, server_tool_use, mcp_tool_use, tool_result
// and the *_tool_result blocks of server tools, mcp_tool_result by server, attachments).
func transcript(b *assembly.Body) (*flow.Transcript, error) {
	t := flow.NewTranscript()
	switch sys := b.Get(reqSystem); {
	case sys.Type == gjson.String:
		if sys.Str != "" {
			t.Text(flow.RoleApp, sys.Str, -1)
		}
	case sys.IsArray():
		t.Text(flow.RoleApp, assembly.ContentText(sys), -1)
	}
	msgs := b.Get(reqMessages)
	if !msgs.IsArray() {
		return nil, assembly.Invalid(reqMessages, "messages must be an array")
	}
	i := 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		readMessage(t, m, i)
		i++
		return true
	})
	return t, nil
}

// readMessage reads one message; a role other than user and assistant is output of an unknown call.
func readMessage(t *flow.Transcript, m gjson.Result, i int) {
	role := flow.RoleUser
	switch m.Get("role").String() {
	case "user":
	case "assistant":
		role = flow.RoleAssistant
	default:
		t.Untrusted(surface.JSONText(m, false), i)
		return
	}
	content := m.Get("content")
	if !content.IsArray() {
		surface.AddMessage(t, role, content, i)
		return
	}
	var text []string
	flush := func() {
		if len(text) > 0 {
			t.Text(role, strings.Join(text, "\n"), i)
			text = text[:0]
		}
	}
	content.ForEach(func(_, b gjson.Result) bool {
		typ := b.Get("type").String()
		switch {
		case typ == "text":
			text = append(text, b.Get("text").String())
		case typ == "thinking" || typ == "redacted_thinking":
		case typ == "tool_use" || typ == "server_tool_use":
			flush()
			t.Call(b.Get("name").String(), b.Get("id").String(), surface.RawJSON(b.Get("input")), "", i)
		case typ == "mcp_tool_use":
			flush()
			server := b.Get("server_name").String()
			if server == "" {
				server = "?"
			}
			t.Call("mcp", b.Get("id").String(), surface.RawJSON(b.Get("input")), server, i)
		case typ == "tool_result" || strings.HasSuffix(typ, "_tool_result"):
			flush()
			t.Output(b.Get("tool_use_id").String(), surface.OutputOf(b.Get("content")), i)
		case role == flow.RoleUser:
			flush()
			t.Attachment(surface.JSONText(b, false), i) // an attachment
		}
		return true
	})
	flush()
}

// userTexts calls each with the texts of the user messages of a body, and their paths.
func userTexts(body []byte, each func(path string, text gjson.Result)) {
	i := 0
	gjson.GetBytes(body, reqMessages).ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").String() == "user" {
			surface.ContentTexts(m.Get("content"), reqMessages+"."+strconv.Itoa(i)+".content", each)
		}
		i++
		return true
	})
}
