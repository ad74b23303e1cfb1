package chat

import (
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/proxy/surface"
)

// transcript reads a Chat Completions body for the information-flow rules: messages with roles
// system, developer, user, assistant (content, tool_calls, legacy function_call), tool
// (tool_call_id), legacy function (name); a message of another role is output of an unknown call.
func transcript(b *assembly.Body) (*flow.Transcript, error) {
	msgs := b.Get(reqMessages)
	if !msgs.IsArray() {
		return nil, assembly.Invalid(reqMessages, "messages must be an array")
	}
	t := flow.NewTranscript()
	i := 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		content := m.Get("content")
		switch m.Get("role").String() {
		case "system", "developer":
			surface.AddMessage(t, flow.RoleApp, content, i)
		case "user":
			surface.AddMessage(t, flow.RoleUser, content, i)
		case "assistant":
			surface.AddMessage(t, flow.RoleAssistant, content, i)
			m.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
				id := tc.Get("id").String()
				if tc.Get("type").String() == "custom" {
					t.Call(tc.Get("custom.name").String(), id, surface.RawJSON(tc.Get("custom.input")), "", i)
				} else {
					t.Call(tc.Get("function.name").String(), id, []byte(tc.Get("function.arguments").String()), "", i)
				}
				return true
			})
			if fc := m.Get("function_call"); fc.IsObject() {
				t.LegacyCall(fc.Get("name").String(), []byte(fc.Get("arguments").String()), i)
			}
		case "tool":
			t.Output(m.Get("tool_call_id").String(), surface.OutputOf(content), i)
		case "function":
			t.LegacyOutput(m.Get("name").String(), surface.OutputOf(content), i)
		default:
			t.Untrusted(surface.JSONText(m, false), i)
		}
		i++
		return true
	})
	return t, nil
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
