package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
)

// Shapes of the upstream's answer, chosen per request by the HeaderShape request header (which both
// proxies pass on unchanged).
const (
	shapeJSON    = "json"     // a non-stream chat completion
	shapeSSE     = "sse"      // a stream of text chunks
	shapeSSETool = "sse-tool" // a stream of text chunks and one tool call (get_ticket, allowed)
	// The same stream on the Anthropic Messages and the OpenAI Responses surfaces.
	shapeMessagesTool  = "messages-tool"
	shapeResponsesTool = "responses-tool"
)

// API paths of the surfaces.
const (
	pathChat      = "/v1/chat/completions"
	pathMessages  = "/v1/messages"
	pathResponses = "/v1/responses"
)

// Request headers the fake upstream reads.
const (
	HeaderShape = "X-Bench-Shape"
	// HeaderCapture asks the upstream to keep the body it received, for the pre-run checks.
	HeaderCapture = "X-Bench-Capture"
)

// Workload names.
const (
	wlSmall      = "small"
	wlChat8K     = "chat8k"
	wlCtx40K     = "ctx40k"
	wlChat2K     = "chat2k"
	wlStream     = "stream"
	wlStreamTool = "stream-tool"
	wlPlugins1   = "plugins1"
	wlPlugins3   = "plugins3"
	wlMessages   = "messages-tool"
	wlResponses  = "responses-tool"
)

// workload is one kind of request, sent the same way to every target.
type workload struct {
	Name, Desc string
	Body       []byte
	Shape      string
	// Path is the API path the workload is sent to ("" is Chat Completions').
	Path string
	// Plugins is the number of context-source plugins of the promptgate instance that serves it.
	Plugins int
	// check verifies, on one request through promptgate, that the pipeline did its work: upstream
	// is the body the upstream received, header and body the answer the client got.
	check func(upstream []byte, header http.Header, body []byte) error
}

// Stream reports whether the upstream answers with SSE.
func (w *workload) Stream() bool { return w.Shape != shapeJSON }

// path is the API path of the workload's requests.
func (w *workload) path() string {
	if w.Path == "" {
		return pathChat
	}
	return w.Path
}

func workloadNames() []string {
	return []string{wlSmall, wlChat8K, wlCtx40K, wlChat2K, wlStream, wlStreamTool, wlPlugins1, wlPlugins3, wlMessages, wlResponses}
}

// The tools every tool-carrying request declares. The bench protocol denies create_note, so
// promptgate removes it (tool filtering), and vets calls of the two others against their schemas
// and argument rules.
var benchTools = []tool{
	fnTool("search_docs", "Search the team's documentation; returns the best passages as JSON.", map[string]any{
		"type": "object",
		"properties": map[string]any{
			"query": map[string]any{"type": "string", "description": "what to look for"},
			"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": 20},
		},
		"required": []string{"query"},
	}),
	fnTool("get_ticket", "Read one support ticket by its id (T-<digits>).", map[string]any{
		"type": "object",
		"properties": map[string]any{
			"id": map[string]any{"type": "string", "description": "the ticket id, e.g. T-1234"},
		},
		"required":             []string{"id"},
		"additionalProperties": false,
	}),
	fnTool("create_note", "Add a note to a ticket.", map[string]any{
		"type": "object",
		"properties": map[string]any{
			"ticket": map[string]any{"type": "string"},
			"text":   map[string]any{"type": "string", "maxLength": 2000},
		},
		"required": []string{"ticket", "text"},
	}),
}

type tool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		Parameters  map[string]any `json:"parameters"`
	} `json:"function"`
}

func fnTool(name, desc string, params map[string]any) tool {
	t := tool{Type: "function"}
	t.Function.Name, t.Function.Description, t.Function.Parameters = name, desc, params
	return t
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatBody is a chat-completions request; the field order is the order of the JSON.
type chatBody struct {
	Model       string         `json:"model"`
	Temperature float64        `json:"temperature,omitempty"`
	Stream      bool           `json:"stream,omitempty"`
	Tools       []tool         `json:"tools,omitempty"`
	Messages    []message      `json:"messages"`
	Promptgate  map[string]any `json:"promptgate,omitempty"`
}

const prose = "The quick brown fox jumps over the lazy dog while the \"build\" pipeline runs its tests.\n\tThen it naps. "

// conversation appends alternating user and assistant turns until the body marshals to at least
// size bytes.
func conversation(b chatBody, size int) []byte {
	for i := 0; ; i++ {
		out, err := json.Marshal(b)
		if err != nil {
			panic("bench: marshal request: " + err.Error()) // plain structs always marshal
		}
		if len(out) >= size || i > 10_000 {
			return out
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		n := min(4, (size-len(out))/len(prose)+1)
		b.Messages = append(b.Messages, message{role, strings.Repeat(prose, n)})
	}
}

func smallBody() []byte {
	out, _ := json.Marshal(chatBody{Model: "gpt-4o-mini", Messages: []message{
		{"system", "You are a helpful assistant."},
		{"user", "What is the capital of France? Answer in one word."},
	}})
	return out
}

// chat8KBody is about 8 KB: a client system message, the three tools, a small promptgate.context
// and user/assistant turns.
func chat8KBody() []byte {
	return conversation(chatBody{
		Model: "gpt-4o-mini", Temperature: 0.2, Tools: benchTools,
		Messages: []message{{"system", "You are the payments team's assistant.\nAnswer briefly, cite ticket ids."}},
		Promptgate: map[string]any{"user": "u-1", "conversation": "c-9", "context": map[string]any{
			"ticket": map[string]any{"id": "T-1234", "title": "Refund stuck in \"pending\"", "tags": []string{"billing", "refunds"}},
			"memory": map[string]any{"lang": "en", "tz": "Europe/Zurich"},
		}},
	}, 8<<10)
}

// ctx40KBody carries about 40 KB of runtime context, which promptgate must shorten to its budget.
func ctx40KBody() []byte {
	var attachments []map[string]string
	for i := range 10 {
		attachments = append(attachments, map[string]string{
			"name": fmt.Sprintf("notes-%d.md", i),
			"text": strings.Repeat("Quarterly numbers \"look\" fine.\n=== SYSTEM CORE ===\t", 80),
		})
	}
	out, _ := json.Marshal(chatBody{
		Model: "gpt-4o-mini",
		Messages: []message{
			{"system", "You summarise documents."},
			{"user", "Summarise the attached notes in three bullet points."},
		},
		Promptgate: map[string]any{"user": "u-1", "context": map[string]any{
			"attachments": attachments, "memory": map[string]any{"lang": "en"},
		}},
	})
	return out
}

// chat2KBody is about 2 KB with the three tools: the request of the stream workloads, and, not
// streamed, that of chat2k.
func chat2KBody(stream bool) []byte {
	return conversation(chatBody{
		Model: "gpt-4o-mini", Stream: stream, Tools: benchTools,
		Messages:   []message{{"system", "You are the support desk's assistant."}},
		Promptgate: map[string]any{"user": "u-1", "conversation": "c-9"},
	}, 2<<10)
}

// workloads returns every workload, in report order.
func workloads() []*workload {
	chat8K := chat8KBody()
	return []*workload{
		{Name: wlSmall, Desc: "small chat, no tools", Body: smallBody(), Shape: shapeJSON, check: checkLayered},
		{Name: wlChat8K, Desc: "8 KB chat, 3 tools (1 removed)", Body: chat8K, Shape: shapeJSON, check: checkTools},
		{Name: wlCtx40K, Desc: "40 KB runtime context, truncated", Body: ctx40KBody(), Shape: shapeJSON, check: checkTruncated},
		{Name: wlChat2K, Desc: "2 KB chat, 3 tools (1 removed)", Body: chat2KBody(false), Shape: shapeJSON, check: checkTools},
		{Name: wlStream, Desc: "2 KB chat, stream of text chunks", Body: chat2KBody(true), Shape: shapeSSE, check: checkStream},
		{Name: wlStreamTool, Desc: "2 KB chat, stream with a tool call (held, vetted, released)", Body: chat2KBody(true), Shape: shapeSSETool, check: checkStreamTool},
		{Name: wlPlugins1, Desc: "8 KB chat, 1 plugin (cached)", Body: chat8K, Shape: shapeJSON, Plugins: 1, check: checkSources("memory")},
		{Name: wlPlugins3, Desc: "8 KB chat, 3 plugins (1 cached)", Body: chat8K, Shape: shapeJSON, Plugins: 3, check: checkSources("memory", "profile", "tickets")},
		{Name: wlMessages, Desc: "2 KB Anthropic Messages, stream with a tool_use block", Body: messages2KBody(), Shape: shapeMessagesTool,
			Path: pathMessages, check: checkSurfaceTool("system", `"name":"get_ticket"`, `"stop_reason":"tool_use"`)},
		{Name: wlResponses, Desc: "2 KB Responses, stream with a function call", Body: responses2KBody(), Shape: shapeResponsesTool,
			Path: pathResponses, check: checkSurfaceTool("instructions", `"name":"get_ticket"`, `"type":"response.completed"`)},
	}
}

// anthropicTool is a tool of an Anthropic Messages request.
type anthropicTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
}

// responsesTool is a function tool of a Responses request.
type responsesTool struct {
	Type        string         `json:"type"`
	Name        string         `json:"name"`
	Description string         `json:"description"`
	Parameters  map[string]any `json:"parameters"`
}

// turns is the user and assistant turns of chat2KBody, for the other surfaces.
func turns() []message {
	var b chatBody
	if err := json.Unmarshal(chat2KBody(true), &b); err != nil {
		panic("bench: " + err.Error()) // our own JSON
	}
	return b.Messages[1:]
}

// messages2KBody is chat2KBody as an Anthropic Messages request: the system message as system, the
// tools with input_schema.
func messages2KBody() []byte {
	var tools []anthropicTool
	for _, t := range benchTools {
		tools = append(tools, anthropicTool{t.Function.Name, t.Function.Description, t.Function.Parameters})
	}
	out, _ := json.Marshal(struct {
		Model      string          `json:"model"`
		MaxTokens  int             `json:"max_tokens"`
		Stream     bool            `json:"stream"`
		System     string          `json:"system"`
		Tools      []anthropicTool `json:"tools"`
		Messages   []message       `json:"messages"`
		Promptgate map[string]any  `json:"promptgate"`
	}{"claude-sonnet-4-5", 1024, true, "You are the support desk's assistant.", tools, turns(),
		map[string]any{"user": "u-1", "conversation": "c-9"}})
	return out
}

// responses2KBody is chat2KBody as a Responses request: the system message as instructions, the
// turns as input.
func responses2KBody() []byte {
	var tools []responsesTool
	for _, t := range benchTools {
		tools = append(tools, responsesTool{"function", t.Function.Name, t.Function.Description, t.Function.Parameters})
	}
	out, _ := json.Marshal(struct {
		Model        string          `json:"model"`
		Stream       bool            `json:"stream"`
		Instructions string          `json:"instructions"`
		Tools        []responsesTool `json:"tools"`
		Input        []message       `json:"input"`
		Promptgate   map[string]any  `json:"promptgate"`
	}{"gpt-4.1", true, "You are the support desk's assistant.", tools, turns(),
		map[string]any{"user": "u-1", "conversation": "c-9"}})
	return out
}

// systemOf returns the first message of the body promptgate sent upstream, checking the layering.
func systemOf(upstream []byte) (string, error) {
	if gjson.GetBytes(upstream, "promptgate").Exists() {
		return "", fmt.Errorf("the promptgate field reached the upstream")
	}
	m := gjson.GetBytes(upstream, "messages.0")
	content := m.Get("content").String()
	if m.Get("role").String() != "system" || !strings.HasPrefix(content, "=== SYSTEM CORE ===") {
		return "", fmt.Errorf("the upstream's first message is not the layered system prompt: %.120q", m.Raw)
	}
	if !strings.Contains(content, "=== RUNTIME CONTEXT") {
		return "", fmt.Errorf("the system prompt has no RUNTIME CONTEXT block")
	}
	return content, nil
}

func checkLayered(upstream []byte, _ http.Header, _ []byte) error {
	_, err := systemOf(upstream)
	return err
}

func checkTools(upstream []byte, h http.Header, body []byte) error {
	if err := checkLayered(upstream, h, body); err != nil {
		return err
	}
	if got := h.Get("X-Promptgate-Tools-Removed"); got != "create_note" {
		return fmt.Errorf("X-Promptgate-Tools-Removed is %q, want create_note", got)
	}
	if n := gjson.GetBytes(upstream, "tools.#").Int(); n != 2 {
		return fmt.Errorf("the upstream got %d tools, want 2", n)
	}
	return nil
}

func checkTruncated(upstream []byte, h http.Header, body []byte) error {
	s, err := systemOf(upstream)
	if err != nil {
		return err
	}
	if !strings.Contains(s, `"truncated":true`) {
		return fmt.Errorf("the runtime context was not truncated")
	}
	return nil
}

func checkStream(upstream []byte, h http.Header, body []byte) error {
	if err := checkTools(upstream, h, body); err != nil {
		return err
	}
	if !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		return fmt.Errorf("the stream did not end with [DONE]")
	}
	return nil
}

func checkStreamTool(upstream []byte, h http.Header, body []byte) error {
	if err := checkStream(upstream, h, body); err != nil {
		return err
	}
	if h.Get("X-Promptgate-Blocked") != "" || !strings.Contains(string(body), `"name":"get_ticket"`) ||
		!strings.Contains(string(body), `"finish_reason":"tool_calls"`) {
		return fmt.Errorf("the tool call was not released to the client")
	}
	return nil
}

// checkSurfaceTool checks a stream with a tool call on the Messages or Responses surface: the
// layered system prompt in the upstream body's member system, the denied tool removed, and the
// answer holding every want.
func checkSurfaceTool(system string, want ...string) func([]byte, http.Header, []byte) error {
	return func(upstream []byte, h http.Header, body []byte) error {
		if gjson.GetBytes(upstream, "promptgate").Exists() {
			return fmt.Errorf("the promptgate field reached the upstream")
		}
		sys := gjson.GetBytes(upstream, system)
		if sys.IsArray() {
			sys = sys.Get("0.text")
		}
		if !strings.HasPrefix(sys.String(), "=== SYSTEM CORE ===") || !strings.Contains(sys.String(), "=== RUNTIME CONTEXT") {
			return fmt.Errorf("the upstream's %s is not the layered system prompt: %.120q", system, sys.Raw)
		}
		if got := h.Get("X-Promptgate-Tools-Removed"); got != "create_note" {
			return fmt.Errorf("X-Promptgate-Tools-Removed is %q, want create_note", got)
		}
		if n := gjson.GetBytes(upstream, "tools.#").Int(); n != 2 {
			return fmt.Errorf("the upstream got %d tools, want 2", n)
		}
		for _, w := range want {
			if !strings.Contains(string(body), w) {
				return fmt.Errorf("the answer lacks %s: the tool call was not released", w)
			}
		}
		if h.Get("X-Promptgate-Blocked") != "" {
			return fmt.Errorf("a call was blocked")
		}
		return nil
	}
}

func checkSources(names ...string) func([]byte, http.Header, []byte) error {
	return func(upstream []byte, h http.Header, body []byte) error {
		s, err := systemOf(upstream)
		if err != nil {
			return err
		}
		if err := checkTools(upstream, h, body); err != nil {
			return err
		}
		for _, n := range names {
			if !strings.Contains(s, `"`+n+`":{"bench":`) {
				return fmt.Errorf("the runtime context lacks the %s plugin's answer", n)
			}
		}
		return nil
	}
}
