// Package flowtest holds what the tests of the information-flow rules share (policy/flow's own, and
// the proxy's end-to-end ones): conversations written once in a neutral form and rendered to each
// surface's request body, and the scenario suites of policy/flow/testdata/agentflows — a protocol
// per suite and conversations modelled on public agent prompt-injection attack classes, each a
// benign task and its attacked variant with the calls the model then makes and the verdict each
// must get.
//
// It is imported by tests only. It does not judge calls (policy/flow does).
package flowtest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/flow"
)

// Turn is one turn of a conversation in a neutral form: an app (system) message, a user message,
// the assistant's text and calls, or a tool's output (Tool is the id of the call it answers).
type Turn struct {
	App       string `json:"app,omitempty"`
	User      string `json:"user,omitempty"`
	Assistant string `json:"assistant,omitempty"`
	Calls     []Call `json:"calls,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Output    string `json:"output,omitempty"`
}

// Call is a tool call of an assistant turn.
type Call struct {
	ID   string          `json:"id"`
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
}

// Surface names a request format a conversation renders to; its value is the surface's route label.
type Surface string

// The surfaces a conversation renders to.
const (
	Chat      Surface = "chat"      // POST /v1/chat/completions
	Responses Surface = "responses" // POST /v1/responses
	Messages  Surface = "messages"  // POST /v1/messages (Anthropic)
	Gemini    Surface = "gemini"    // POST /v1beta/models/{model}:generateContent (Google)
)

// Surfaces are the surfaces a conversation renders to.
var Surfaces = []Surface{Chat, Responses, Messages, Gemini}

// Path is the surface's route.
func (s Surface) Path() string {
	switch s {
	case Responses:
		return "/v1/responses"
	case Messages:
		return "/v1/messages"
	case Gemini:
		return "/v1beta/models/m:generateContent"
	}
	return "/v1/chat/completions"
}

// Transcript is the conversation as a surface reads it, written without a wire format: what each
// surface's reader must give for the bodies Render writes.
func Transcript(turns []Turn) *flow.Transcript {
	tr := flow.NewTranscript()
	for i, tu := range turns {
		switch {
		case tu.App != "":
			tr.Text(flow.RoleApp, tu.App, i)
		case tu.User != "":
			tr.Text(flow.RoleUser, tu.User, i)
		case tu.Assistant != "" || len(tu.Calls) > 0:
			if tu.Assistant != "" {
				tr.Text(flow.RoleAssistant, tu.Assistant, i)
			}
			for _, c := range tu.Calls {
				tr.Call(c.Tool, c.ID, Args(c.Args), "", i)
			}
		default:
			tr.Output(tu.Tool, flow.Output{Text: tu.Output, Doc: tu.Output}, i)
		}
	}
	return tr
}

type obj = map[string]any

// Render writes a request body of surface s holding the conversation, with extra top-level fields
// merged.
func Render(t testing.TB, s Surface, turns []Turn, extra map[string]any) []byte {
	t.Helper()
	body := obj{"model": "m"}
	switch s {
	case Chat:
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
					calls = append(calls, obj{"id": c.ID, "type": "function", "function": obj{"name": c.Tool, "arguments": string(Args(c.Args))}})
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
	case Responses:
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
					items = append(items, obj{"type": "function_call", "call_id": c.ID, "name": c.Tool, "arguments": string(Args(c.Args))})
				}
			default:
				items = append(items, obj{"type": "function_call_output", "call_id": tu.Tool, "output": tu.Output})
			}
		}
		body["input"] = items
	case Messages:
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
					add("assistant", obj{"type": "tool_use", "id": c.ID, "name": c.Tool, "input": json.RawMessage(Args(c.Args))})
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
	case Gemini:
		delete(body, "model") // the model is in the path
		renderGemini(body, turns)
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

// renderGemini writes the conversation as a generateContent body: app texts as systemInstruction's
// parts, a content per turn, calls and their responses with the call's id (and the response named
// as its call).
func renderGemini(body obj, turns []Turn) {
	var contents, system []any
	names := map[string]string{}
	for _, tu := range turns {
		switch {
		case tu.App != "":
			system = append(system, obj{"text": tu.App})
		case tu.User != "":
			contents = append(contents, obj{"role": "user", "parts": []any{obj{"text": tu.User}}})
		case tu.Assistant != "" || len(tu.Calls) > 0:
			var parts []any
			if tu.Assistant != "" {
				parts = append(parts, obj{"text": tu.Assistant})
			}
			for _, c := range tu.Calls {
				names[c.ID] = c.Tool
				parts = append(parts, obj{"functionCall": obj{"id": c.ID, "name": c.Tool, "args": json.RawMessage(Args(c.Args))}})
			}
			contents = append(contents, obj{"role": "model", "parts": parts})
		default:
			name := names[tu.Tool]
			if name == "" {
				name = "unknown"
			}
			contents = append(contents, obj{"role": "user", "parts": []any{obj{"functionResponse": obj{"id": tu.Tool, "name": name,
				"response": obj{"output": tu.Output}}}}})
		}
	}
	if system != nil {
		body["systemInstruction"] = obj{"parts": system}
	}
	body["contents"] = contents
}

// Args is a call's arguments, {} when it has none.
func Args(a json.RawMessage) json.RawMessage {
	if len(a) == 0 {
		return json.RawMessage("{}")
	}
	return a
}

// Suite is one file of testdata/agentflows: a protocol definition and its scenarios.
type Suite struct {
	Suite     string          `json:"suite"`
	Protocol  json.RawMessage `json:"protocol"`
	Scenarios []Scenario      `json:"scenarios"`
}

// Scenario is a benign task and its attacked variant: the same conversation with an injection
// appended to one tool output (Inject), or a conversation of its own (AttackedTurns); and the calls
// the model then makes, each with the verdict expected.
type Scenario struct {
	Name          string     `json:"name"`
	Class         string     `json:"class"`
	Turns         []Turn     `json:"turns"`
	Benign        []Expected `json:"benign"`
	Inject        *Injection `json:"inject"`
	AttackedTurns []Turn     `json:"attacked_turns"`
	Attacked      []Expected `json:"attacked"`
}

// Injection is text appended to the output of the call Into.
type Injection struct{ Into, Text string }

// Expected is a call the model makes and what must become of it.
type Expected struct {
	Tool   string          `json:"tool"`
	Args   json.RawMessage `json:"args"`
	Expect string          `json:"expect"` // allowed, blocked or held
	Kind   string          `json:"kind"`   // the first decision's kind
}

// AttackedConversation is the scenario's attacked conversation.
func (sc Scenario) AttackedConversation(t testing.TB) []Turn {
	t.Helper()
	if sc.AttackedTurns != nil {
		return sc.AttackedTurns
	}
	if sc.Inject == nil {
		t.Fatalf("%s: no attacked variant", sc.Name)
	}
	return Inject(t, sc.Turns, sc.Inject.Into, sc.Inject.Text)
}

// Inject appends text to the output of the call with the given id.
func Inject(t testing.TB, turns []Turn, id, text string) []Turn {
	t.Helper()
	out := append([]Turn(nil), turns...)
	for i := range out {
		if out[i].Tool == id {
			out[i].Output += "\n" + text
			return out
		}
	}
	t.Fatalf("no output of call %q to inject into", id)
	return nil
}

// LoadSuites reads every suite of dir (policy/flow/testdata/agentflows), strictly.
func LoadSuites(t testing.TB, dir string) []Suite {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no suites in %s: %v", dir, err)
	}
	var out []Suite
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s Suite
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, s)
	}
	return out
}

// Labels lists a conversation's segments as "source:text", trusted ones marked "+".
func Labels(c *flow.Conversation) []string {
	var out []string
	for i, s := range c.Segments() {
		mark := ""
		if c.Trusted(i) {
			mark = "+"
		}
		out = append(out, mark+s.Source.String()+":"+s.Text)
	}
	return out
}

// CallNames lists calls as "tool#id(args)".
func CallNames(calls []flow.HistoryCall) []string {
	var out []string
	for _, h := range calls {
		out = append(out, h.Tool+"#"+h.ID+"("+string(h.Args)+")")
	}
	return out
}

// SameTranscript fails the test when a surface's reading of a conversation differs from the neutral
// one: its segments (empty assistant texts aside: an assistant message with calls only has one on
// some surfaces), calls (arguments compared compact: Messages carries them as an object) and unseen
// history.
func SameTranscript(t testing.TB, name string, got, want *flow.Transcript) {
	t.Helper()
	seg := func(tr *flow.Transcript) []string {
		var out []string
		for _, s := range tr.Segments() {
			if s.Source.Kind == flow.SourceAssistant && s.Text == "" {
				continue
			}
			out = append(out, s.Source.String()+":"+s.Text+"|"+s.Doc)
		}
		return out
	}
	if g, w := strings.Join(seg(got), "\n"), strings.Join(seg(want), "\n"); g != w {
		t.Errorf("%s: segments\n got %q\nwant %q", name, seg(got), seg(want))
	}
	compactCalls := func(calls []flow.HistoryCall) string {
		out := make([]flow.HistoryCall, len(calls))
		for i, c := range calls {
			out[i] = c
			var b bytes.Buffer
			if json.Compact(&b, c.Args) == nil {
				out[i].Args = b.Bytes()
			}
		}
		return strings.Join(CallNames(out), " ")
	}
	if g, w := compactCalls(got.Calls()), compactCalls(want.Calls()); g != w {
		t.Errorf("%s: calls\n got %s\nwant %s", name, g, w)
	}
	if got.Unseen() != want.Unseen() {
		t.Errorf("%s: unseen %q, want %q", name, got.Unseen(), want.Unseen())
	}
}
