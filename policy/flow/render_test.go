package flow_test

import (
	"encoding/json"
	"testing"

	"github.com/promptgate/promptgate/policy/flow"
)

// A conversation in a neutral form, written once and rendered to each surface's request body.
type turn struct {
	App       string        `json:"app,omitempty"`
	User      string        `json:"user,omitempty"`
	Assistant string        `json:"assistant,omitempty"`
	Calls     []neutralCall `json:"calls,omitempty"`
	// Tool is the id of the call whose output this is; Output the output's text.
	Tool   string `json:"tool,omitempty"`
	Output string `json:"output,omitempty"`
}

type neutralCall struct {
	ID   string          `json:"id"`
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
}

var surfaces = []flow.Surface{flow.SurfaceChat, flow.SurfaceResponses, flow.SurfaceMessages}

type obj = map[string]any

// render writes a request body of surface s holding the conversation (extra top-level fields merged).
func render(t testing.TB, s flow.Surface, turns []turn, extra obj) []byte {
	t.Helper()
	body := obj{"model": "m"}
	switch s {
	case flow.SurfaceChat:
		var msgs []any
		for _, tu := range turns {
			switch {
			case tu.App != "":
				msgs = append(msgs, obj{"role": "system", "content": tu.App})
			case tu.User != "":
				msgs = append(msgs, obj{"role": "user", "content": []any{obj{"type": "text", "text": tu.User}}})
			case tu.Assistant != "" || len(tu.Calls) > 0:
				m := obj{"role": "assistant", "content": nil}
				if tu.Assistant != "" {
					m["content"] = tu.Assistant
				}
				var calls []any
				for _, c := range tu.Calls {
					calls = append(calls, obj{"id": c.ID, "type": "function", "function": obj{"name": c.Tool, "arguments": string(args(c.Args))}})
				}
				if calls != nil {
					m["tool_calls"] = calls
				}
				msgs = append(msgs, m)
			default:
				msgs = append(msgs, obj{"role": "tool", "tool_call_id": tu.Tool, "content": tu.Output})
			}
		}
		body["messages"] = msgs
	case flow.SurfaceResponses:
		var items []any
		instructions := false
		for _, tu := range turns {
			switch {
			case tu.App != "" && !instructions:
				body["instructions"] = tu.App
				instructions = true
			case tu.App != "":
				items = append(items, obj{"role": "developer", "content": tu.App})
			case tu.User != "":
				items = append(items, obj{"type": "message", "role": "user", "content": []any{obj{"type": "input_text", "text": tu.User}}})
			case tu.Assistant != "" || len(tu.Calls) > 0:
				if tu.Assistant != "" {
					items = append(items, obj{"type": "message", "role": "assistant", "content": []any{obj{"type": "output_text", "text": tu.Assistant}}})
				}
				for _, c := range tu.Calls {
					items = append(items, obj{"type": "function_call", "call_id": c.ID, "name": c.Tool, "arguments": string(args(c.Args))})
				}
			default:
				items = append(items, obj{"type": "function_call_output", "call_id": tu.Tool, "output": tu.Output})
			}
		}
		body["input"] = items
	case flow.SurfaceMessages:
		var msgs []any
		var system []any
		role := ""
		var blocks []any
		flush := func() {
			if role != "" {
				msgs = append(msgs, obj{"role": role, "content": blocks})
			}
			role, blocks = "", nil
		}
		add := func(r string, b any) {
			if r != role {
				flush()
				role = r
			}
			blocks = append(blocks, b)
		}
		for _, tu := range turns {
			switch {
			case tu.App != "":
				system = append(system, obj{"type": "text", "text": tu.App})
			case tu.User != "":
				add("user", obj{"type": "text", "text": tu.User})
			case tu.Assistant != "" || len(tu.Calls) > 0:
				if tu.Assistant != "" {
					add("assistant", obj{"type": "text", "text": tu.Assistant})
				}
				for _, c := range tu.Calls {
					add("assistant", obj{"type": "tool_use", "id": c.ID, "name": c.Tool, "input": json.RawMessage(args(c.Args))})
				}
			default:
				add("user", obj{"type": "tool_result", "tool_use_id": tu.Tool, "content": []any{obj{"type": "text", "text": tu.Output}}})
			}
		}
		flush()
		if system != nil {
			body["system"] = system
		}
		body["messages"] = msgs
	}
	for k, v := range extra {
		body[k] = v
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func args(a json.RawMessage) json.RawMessage {
	if len(a) == 0 {
		return json.RawMessage("{}")
	}
	return a
}

// mustCompile compiles a spec written as JSON.
func mustCompile(t testing.TB, spec string) *flow.Policy {
	t.Helper()
	var s flow.Spec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("spec: %v", err)
	}
	p, err := flow.Compile(s)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return p
}

// analyze renders and analyzes a conversation.
func analyze(t testing.TB, p *flow.Policy, s flow.Surface, turns []turn, opt flow.Options) *flow.Conversation {
	t.Helper()
	c, err := p.Analyze(s, render(t, s, turns, nil), opt)
	if err != nil {
		t.Fatalf("%s: analyze: %v", s, err)
	}
	return c
}
