package demo

import (
	"errors"
	"strings"

	"github.com/tidwall/gjson"
)

// API is one of the wire formats the model speaks.
type API int

const (
	// Chat is OpenAI Chat Completions.
	Chat API = iota
	// Responses is the OpenAI Responses API.
	Responses
	// Messages is Anthropic Messages.
	Messages
	// Gemini is Google's generateContent (streamGenerateContent with alt=sse for a stream).
	Gemini
)

func (a API) String() string {
	switch a {
	case Responses:
		return "responses"
	case Messages:
		return "messages"
	case Gemini:
		return "gemini"
	}
	return "chat"
}

// Role is who said a turn of the conversation, as the model reads it.
type Role string

const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool" // a tool's output
)

// Turn is one message of the conversation: who said it and its text.
type Turn struct {
	Role Role
	Text string
}

// Request is what the model reads of a request: the system prompt, the tools it may call, the
// conversation.
type Request struct {
	// System is the system prompt (system and developer messages, Responses instructions, Anthropic
	// system).
	System string
	// Tools are the names of the function tools the request declares.
	Tools []string
	// Turns are the conversation, in order; an assistant's tool calls are an assistant turn of
	// their own.
	Turns []Turn

	stream, includeUsage bool
	model                string
	instructions         string // Responses: the instructions as sent, JSON (echoed in response objects)
}

// Parse reads a request body of api.
func Parse(api API, body []byte) (Request, error) {
	if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
		return Request{}, errors.New("the request body is not a JSON object")
	}
	root := gjson.ParseBytes(body)
	r := Request{stream: root.Get("stream").Bool(), model: root.Get("model").String(),
		includeUsage: root.Get("stream_options.include_usage").Bool()}
	if r.model == "" {
		r.model = Model
	}
	var sys []string
	switch api {
	case Chat:
		sys = r.readChat(root)
	case Responses:
		sys = r.readResponses(root)
	case Gemini:
		sys = r.readGemini(root)
	default:
		sys = r.readMessages(root)
	}
	r.System = strings.Join(sys, "\n\n")
	return r, nil
}

func (r *Request) add(role Role, text string) { r.Turns = append(r.Turns, Turn{role, text}) }

func (r *Request) readChat(root gjson.Result) (sys []string) {
	for _, m := range root.Get("messages").Array() {
		text := texts(m.Get("content"), "text")
		switch m.Get("role").String() {
		case "system", "developer":
			sys = append(sys, text)
		case "user":
			r.add(RoleUser, text)
		case "assistant":
			r.add(RoleAssistant, text)
		case "tool", "function":
			r.add(RoleTool, text)
		}
	}
	for _, t := range root.Get("tools").Array() {
		if t.Get("type").String() == "function" {
			r.Tools = append(r.Tools, t.Get("function.name").String())
		}
	}
	for _, f := range root.Get("functions").Array() {
		r.Tools = append(r.Tools, f.Get("name").String())
	}
	return sys
}

func (r *Request) readResponses(root gjson.Result) (sys []string) {
	if in := root.Get("instructions"); in.Type == gjson.String {
		sys = append(sys, in.Str)
		r.instructions = in.Raw
	}
	input := root.Get("input")
	if input.Type == gjson.String {
		r.add(RoleUser, input.Str)
	}
	for _, it := range input.Array() {
		switch typ := it.Get("type").String(); {
		case typ == "function_call", typ == "custom_tool_call":
			r.add(RoleAssistant, "")
		case strings.HasSuffix(typ, "_call_output"):
			r.add(RoleTool, texts(it.Get("output"), "input_text", "output_text", "text"))
		case typ == "" || typ == "message":
			text := texts(it.Get("content"), "input_text", "output_text", "text")
			switch it.Get("role").String() {
			case "system", "developer":
				sys = append(sys, text)
			case "user":
				r.add(RoleUser, text)
			case "assistant":
				r.add(RoleAssistant, text)
			}
		}
	}
	for _, t := range root.Get("tools").Array() {
		if t.Get("type").String() == "function" {
			r.Tools = append(r.Tools, t.Get("name").String())
		}
	}
	return sys
}

func (r *Request) readMessages(root gjson.Result) (sys []string) {
	if s := root.Get("system"); s.Exists() {
		sys = append(sys, texts(s, "text"))
	}
	for _, m := range root.Get("messages").Array() {
		role := RoleUser
		if m.Get("role").String() == "assistant" {
			role = RoleAssistant
		}
		c := m.Get("content")
		if c.Type == gjson.String {
			r.add(role, c.Str)
			continue
		}
		var text []string
		for _, b := range c.Array() {
			switch b.Get("type").String() {
			case "text":
				text = append(text, b.Get("text").String())
			case "tool_result":
				r.add(RoleTool, texts(b.Get("content"), "text"))
			case "tool_use":
				r.add(RoleAssistant, "")
			}
		}
		if len(text) > 0 {
			r.add(role, strings.Join(text, "\n"))
		}
	}
	for _, t := range root.Get("tools").Array() {
		if typ := t.Get("type").String(); typ == "" || typ == "custom" {
			r.Tools = append(r.Tools, t.Get("name").String())
		}
	}
	return sys
}

// either is the member of v named in camelCase or, else, in snake_case, as Google reads a body.
func either(v gjson.Result, camel, snake string) gjson.Result {
	if m := v.Get(camel); m.Exists() {
		return m
	}
	return v.Get(snake)
}

func (r *Request) readGemini(root gjson.Result) (sys []string) {
	var si []string
	for _, p := range either(root, "systemInstruction", "system_instruction").Get("parts").Array() {
		si = append(si, p.Get("text").String())
	}
	if len(si) > 0 {
		sys = append(sys, strings.Join(si, "\n"))
	}
	for _, c := range root.Get("contents").Array() {
		role := RoleUser
		if c.Get("role").String() == "model" {
			role = RoleAssistant
		}
		var text []string
		for _, p := range c.Get("parts").Array() {
			switch {
			case p.Get("text").Exists():
				text = append(text, p.Get("text").String())
			case either(p, "functionCall", "function_call").Exists():
				r.add(RoleAssistant, "")
			case either(p, "functionResponse", "function_response").Exists():
				r.add(RoleTool, either(p, "functionResponse", "function_response").Get("response").Raw)
			}
		}
		if len(text) > 0 {
			r.add(role, strings.Join(text, "\n"))
		}
	}
	for _, t := range root.Get("tools").Array() {
		for _, f := range either(t, "functionDeclarations", "function_declarations").Array() {
			r.Tools = append(r.Tools, f.Get("name").String())
		}
	}
	return sys
}

// texts is the text of a content value: a string, or the text of its parts of the given types, one
// per line.
func texts(v gjson.Result, partTypes ...string) string {
	if v.Type == gjson.String {
		return v.Str
	}
	var out []string
	for _, p := range v.Array() {
		for _, t := range partTypes {
			if p.Get("type").String() == t {
				out = append(out, p.Get("text").String())
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
