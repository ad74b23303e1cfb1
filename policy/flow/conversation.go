package flow

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tidwall/gjson"
)

// Surface is the API a request body belongs to.
type Surface string

// The surfaces.
const (
	SurfaceChat      Surface = "chat"      // POST /v1/chat/completions
	SurfaceResponses Surface = "responses" // POST /v1/responses
	SurfaceMessages  Surface = "messages"  // POST /v1/messages (Anthropic)
)

// Segment is one piece of text of the conversation and its source.
type Segment struct {
	Source Source
	// Text is the segment's text: a message's text parts joined by line breaks, a tool output's
	// strings, the context's string values. It may be empty (an image, a web search's unseen results).
	Text string
	// Message is the index of the message (Chat, Messages) or input item (Responses) it comes from,
	// counted in Options.History when InHistory is set; -1 for instructions, system and context.
	Message   int
	InHistory bool
}

// HistoryCall is a tool call already made in the conversation.
type HistoryCall struct {
	Tool string
	// ID is the call's id ("" for a legacy function_call or a built-in tool without one).
	ID string
	// Args is the raw argument JSON text (a custom tool's input as a JSON string); nil for a
	// built-in tool.
	Args      []byte
	Message   int
	InHistory bool
}

// Options are what the integration knows of a request beyond its body.
type Options struct {
	// History is the part of the conversation the body does not carry, for a Responses request
	// that continues one (previous_response_id, conversation): a JSON array of Responses items,
	// oldest first (what the stored responses' input items and outputs hold, or promptgate's record
	// of what it relayed). Non-nil, even "[]", declares the history seen; nil leaves it unseen, and
	// the rules then treat it as untrusted output whose calls and values cannot be counted.
	History []byte
	// Context are untrusted texts gathered for the request outside its body (plugin answers).
	Context []string
	// Conversation is the id that binds confirmation codes to the conversation (e.g. from
	// X-Promptgate-Conversation). "" takes promptgate.conversation from the body, else a digest of
	// the first user message; with unseen history and neither, calls cannot be confirmed.
	Conversation string
	// Confirmer issues and verifies confirmation codes; nil blocks every call that needs one.
	Confirmer *Confirmer
	// Codes are confirmation codes the app gives for this request beside the conversation (the proxy's
	// X-Promptgate-Confirm header, for apps with a button): each counts as a user's reply to its notice.
	// Text that is not a code is ignored; at most maxCandidates are read.
	Codes []string
}

// Conversation is one request's conversation under a policy. Check is safe for concurrent use;
// everything else is read-only once Analyze returns.
type Conversation struct {
	p         *Policy
	segments  []Segment
	trusted   []bool
	calls     []HistoryCall
	unseen    string // why part of the history is not visible; "" when all of it is
	binding   string
	confirmer *Confirmer
	codes     []code // the app's codes (Options.Codes)

	typedOnce sync.Once
	typed     []code       // see typedCodes
	codeSteps atomic.Int64 // bytes and readings the code search went through, so tests can bound it

	mu   sync.Mutex
	made []string // tools of this response's calls that were let through, in order

	indexOnce sync.Once
	index     *index // see idx
}

// Segments returns the conversation's segments in order.
func (c *Conversation) Segments() []Segment { return c.segments }

// Calls returns the tool calls already made in the conversation, in order.
func (c *Conversation) Calls() []HistoryCall { return c.calls }

// Unseen says why part of the conversation's history is not visible ("previous_response_id",
// "conversation", "item_reference"); "" when all of it is.
func (c *Conversation) Unseen() string { return c.unseen }

// Trusted reports whether segment i is a trusted source under the policy.
func (c *Conversation) Trusted(i int) bool { return c.trusted[i] }

// Analyze reads the conversation of a request body of surface s. The body must be one valid JSON
// object (the proxy has checked it); it is read with gjson, never decoded whole or changed.
func (p *Policy) Analyze(s Surface, body []byte, opt Options) (*Conversation, error) {
	c := &Conversation{p: p, confirmer: opt.Confirmer}
	x := &extractor{c: c, ids: map[string]string{}, dup: map[string]bool{}, legacy: map[string]bool{}}
	root := gjson.Parse(string(body)) // one copy of the body; every text below shares it
	if !root.IsObject() {
		return nil, errors.New("flow: analyze: the body is not a JSON object")
	}
	if opt.History != nil {
		h := gjson.Parse(string(opt.History))
		if !h.IsArray() {
			return nil, errors.New("flow: analyze: history must be a JSON array of Responses items")
		}
		x.inHistory = true
		x.responsesItems(h)
		x.inHistory = false
	}
	var err error
	switch s {
	case SurfaceChat:
		err = x.chat(root)
	case SurfaceResponses:
		err = x.responses(root, opt.History != nil)
	case SurfaceMessages:
		err = x.messages(root)
	default:
		err = fmt.Errorf("unknown surface %q", s)
	}
	if err != nil {
		return nil, fmt.Errorf("flow: analyze: %w", err)
	}
	ext := root.Get("promptgate")
	if ctx := ext.Get("context"); ctx.Exists() && ctx.Type != gjson.Null {
		x.add(Source{Kind: SourceContext}, collectText(ctx, 0, true), -1)
	}
	for _, t := range opt.Context {
		x.add(Source{Kind: SourceContext}, t, -1)
	}
	c.trusted = make([]bool, len(c.segments))
	for i, seg := range c.segments {
		c.trusted[i] = p.trustedSource(seg.Source)
	}
	c.binding = c.bind(opt.Conversation, ext.Get("conversation"))
	c.codes = appCodes(opt.Codes)
	return c, nil
}

// bind chooses the id that binds confirmation codes to the conversation: the client's conversation
// id, else a digest of the text of its first user message that has text. The app's messages are left
// out: where they stand differs between the turns of one conversation (a Responses continuation's
// replayed history puts a developer item before the instructions the client sends again).
func (c *Conversation) bind(explicit string, inBody gjson.Result) string {
	switch {
	case explicit != "":
		return "c:" + explicit
	case inBody.Type == gjson.String && inBody.Str != "":
		return "c:" + inBody.Str
	case c.unseen != "":
		return ""
	}
	first := ""
	for _, seg := range c.segments {
		if seg.Source.Kind == SourceUser && seg.Text != "" {
			first = seg.Text
			break
		}
	}
	sum := sha256.Sum256([]byte(first))
	return "u:" + hex.EncodeToString(sum[:16])
}

// extractor builds a Conversation's segments and calls.
type extractor struct {
	c         *Conversation
	ids       map[string]string // call id -> tool name
	dup       map[string]bool   // call ids given to more than one call
	legacy    map[string]bool   // names of legacy function_calls
	inHistory bool
}

func (x *extractor) add(src Source, text string, msg int) {
	x.c.segments = append(x.c.segments, Segment{Source: src, Text: text, Message: msg, InHistory: x.inHistory})
}

func (x *extractor) call(tool, id string, args []byte, msg int) {
	x.c.calls = append(x.c.calls, HistoryCall{Tool: tool, ID: id, Args: args, Message: msg, InHistory: x.inHistory})
	if id == "" {
		return
	}
	if _, seen := x.ids[id]; seen {
		x.dup[id] = true
	}
	x.ids[id] = tool
}

// output adds a tool output answering the call with the given id: tool:? when that call is not
// known, or its id was given to more than one call.
func (x *extractor) output(id, text string, msg int) {
	tool := ""
	if id != "" && !x.dup[id] {
		tool = x.ids[id]
	}
	x.add(Source{Kind: SourceTool, Tool: tool}, text, msg)
}

// message adds a message's text under kind, and each attachment (a part that is not text) as
// untrusted context; the model's own attachments are not sources and are left out.
func (x *extractor) message(kind SourceKind, content gjson.Result, msg int) {
	text, attachments := contentText(content)
	x.add(Source{Kind: kind}, text, msg)
	if kind == SourceAssistant {
		return
	}
	for _, a := range attachments {
		x.add(Source{Kind: SourceContext}, collectText(a, 0, false), msg)
	}
}

// chat reads a Chat Completions body: messages with roles system, developer, user, assistant
// (content, tool_calls, legacy function_call), tool (tool_call_id) and legacy function (name).
func (x *extractor) chat(root gjson.Result) error {
	msgs := root.Get("messages")
	if !msgs.IsArray() {
		return errors.New("messages must be an array")
	}
	i := 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		content := m.Get("content")
		switch m.Get("role").String() {
		case "system", "developer":
			x.message(SourceApp, content, i)
		case "user":
			x.message(SourceUser, content, i)
		case "assistant":
			x.message(SourceAssistant, content, i)
			m.Get("tool_calls").ForEach(func(_, tc gjson.Result) bool {
				id := tc.Get("id").String()
				if tc.Get("type").String() == "custom" {
					x.call(tc.Get("custom.name").String(), id, rawJSON(tc.Get("custom.input")), i)
				} else {
					x.call(tc.Get("function.name").String(), id, []byte(tc.Get("function.arguments").String()), i)
				}
				return true
			})
			if fc := m.Get("function_call"); fc.IsObject() {
				name := fc.Get("name").String()
				x.call(name, "", []byte(fc.Get("arguments").String()), i)
				x.legacy[name] = true
			}
		case "tool":
			x.output(m.Get("tool_call_id").String(), collectText(content, 0, false), i)
		case "function":
			name := m.Get("name").String()
			if !x.legacy[name] {
				name = ""
			}
			x.add(Source{Kind: SourceTool, Tool: name}, collectText(content, 0, false), i)
		default:
			x.add(Source{Kind: SourceTool}, collectText(m, 0, false), i) // unknown: untrusted
		}
		i++
		return true
	})
	return nil
}

// responses reads a Responses body: instructions, input (a string or items), and whether the
// history continues out of sight (previous_response_id, conversation) when none was supplied.
func (x *extractor) responses(root gjson.Result, historyGiven bool) error {
	if ins := root.Get("instructions"); ins.Type == gjson.String && ins.Str != "" {
		x.add(Source{Kind: SourceApp}, ins.Str, -1)
	}
	switch in := root.Get("input"); {
	case in.Type == gjson.String:
		x.add(Source{Kind: SourceUser}, in.Str, 0)
	case in.IsArray():
		x.responsesItems(in)
	case in.Exists() && in.Type != gjson.Null:
		return errors.New("input must be a string or an array")
	}
	if historyGiven {
		return nil
	}
	if prev := root.Get("previous_response_id"); prev.Type == gjson.String && prev.Str != "" {
		x.c.unseen = "previous_response_id"
	} else if conv := root.Get("conversation"); conv.Exists() && conv.Type != gjson.Null {
		x.c.unseen = "conversation"
	}
	return nil
}

// builtinTool names the tool of a Responses built-in item type, as the allowlist governs it.
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

// responsesItems reads an array of Responses items: messages, function and custom tool calls and
// their outputs, built-in tool items (a call, and the output it carries or that answers it).
func (x *extractor) responsesItems(arr gjson.Result) {
	i := 0
	arr.ForEach(func(_, it gjson.Result) bool {
		typ := it.Get("type").String()
		switch typ {
		case "", "message":
			switch it.Get("role").String() {
			case "system", "developer":
				x.message(SourceApp, it.Get("content"), i)
			case "user":
				x.message(SourceUser, it.Get("content"), i)
			case "assistant":
				x.message(SourceAssistant, it.Get("content"), i)
			default:
				x.add(Source{Kind: SourceTool}, collectText(it, 0, false), i)
			}
		case "function_call":
			x.call(it.Get("name").String(), it.Get("call_id").String(), []byte(it.Get("arguments").String()), i)
		case "custom_tool_call":
			x.call(it.Get("name").String(), it.Get("call_id").String(), rawJSON(it.Get("input")), i)
		case "function_call_output", "custom_tool_call_output", "computer_call_output", "local_shell_call_output",
			"shell_call_output", "apply_patch_call_output":
			x.output(it.Get("call_id").String(), collectText(it.Get("output"), 0, false), i)
		case "reasoning", "mcp_approval_request", "mcp_approval_response":
		case "item_reference":
			if x.c.unseen == "" {
				x.c.unseen = "item_reference"
			}
		default:
			tool := builtinTool(typ)
			if tool == "" {
				x.add(Source{Kind: SourceTool}, collectText(it, 0, false), i) // unknown: untrusted
				break
			}
			id := it.Get("call_id").String()
			if id == "" {
				id = it.Get("id").String()
			}
			if typ != "mcp_list_tools" {
				var args []byte
				if typ == "mcp_call" {
					args = []byte(it.Get("arguments").String())
				}
				x.call(tool, id, args, i)
			}
			switch typ {
			case "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call", "mcp_call", "mcp_list_tools":
				// These items carry their own results (or stand for results read upstream, unseen).
				var out []string
				for _, k := range []string{"results", "outputs", "output", "tools", "error"} {
					if v := it.Get(k); v.Exists() {
						out = append(out, collectText(v, 0, false))
					}
				}
				x.add(Source{Kind: SourceTool, Tool: tool}, strings.Join(out, "\n"), i)
			}
		}
		i++
		return true
	})
}

// messages reads an Anthropic Messages body: system, then messages whose content is a string or
// blocks (text, tool_use, server_tool_use, mcp_tool_use, tool_result and the *_tool_result
// blocks of server tools, attachments).
func (x *extractor) messages(root gjson.Result) error {
	switch sys := root.Get("system"); {
	case sys.Type == gjson.String:
		if sys.Str != "" {
			x.add(Source{Kind: SourceApp}, sys.Str, -1)
		}
	case sys.IsArray():
		text, _ := contentText(sys)
		x.add(Source{Kind: SourceApp}, text, -1)
	}
	msgs := root.Get("messages")
	if !msgs.IsArray() {
		return errors.New("messages must be an array")
	}
	i := 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		kind := SourceUser
		switch m.Get("role").String() {
		case "user":
		case "assistant":
			kind = SourceAssistant
		default:
			x.add(Source{Kind: SourceTool}, collectText(m, 0, false), i)
			i++
			return true
		}
		content := m.Get("content")
		if !content.IsArray() {
			x.message(kind, content, i)
			i++
			return true
		}
		var text []string
		flush := func() {
			if len(text) > 0 {
				x.add(Source{Kind: kind}, strings.Join(text, "\n"), i)
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
				x.call(b.Get("name").String(), b.Get("id").String(), rawJSON(b.Get("input")), i)
			case typ == "mcp_tool_use":
				flush()
				x.call("mcp", b.Get("id").String(), rawJSON(b.Get("input")), i)
			case typ == "tool_result" || strings.HasSuffix(typ, "_tool_result"):
				flush()
				x.output(b.Get("tool_use_id").String(), collectText(b.Get("content"), 0, false), i)
			case kind == SourceUser:
				flush()
				x.add(Source{Kind: SourceContext}, collectText(b, 0, false), i) // an attachment
			}
			return true
		})
		flush()
		i++
		return true
	})
	return nil
}

// rawJSON is a value's raw JSON text, nil when it is absent.
func rawJSON(v gjson.Result) []byte {
	if !v.Exists() {
		return nil
	}
	return []byte(v.Raw)
}

// contentText is the text of a message content: a string, or the text of its text parts
// (text, input_text, output_text) joined by line breaks; parts of other types are attachments.
func contentText(v gjson.Result) (string, []gjson.Result) {
	if v.Type == gjson.String {
		return v.Str, nil
	}
	if !v.IsArray() {
		return "", nil
	}
	var parts []string
	var att []gjson.Result
	v.ForEach(func(_, p gjson.Result) bool {
		switch p.Get("type").String() {
		case "text", "input_text", "output_text", "":
			if t := p.Get("text"); t.Type == gjson.String {
				parts = append(parts, t.Str)
				return true
			}
		case "refusal":
			return true
		}
		att = append(att, p)
		return true
	})
	return strings.Join(parts, "\n"), att
}

// collectText gathers the strings of a tool output, an attachment or the context, joined by line
// breaks: every string value except identifiers, media types and binary payloads (base64 data,
// data: URLs, encrypted content). With keys set, object keys are gathered too (the context's keys
// are its data). Nesting deeper than maxCollectDepth is left out.
func collectText(v gjson.Result, depth int, keys bool) string {
	var b strings.Builder
	var walk func(v gjson.Result, depth int)
	walk = func(v gjson.Result, depth int) {
		if depth > maxCollectDepth {
			return
		}
		switch {
		case v.Type == gjson.String:
			if !strings.HasPrefix(v.Str, "data:") {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(v.Str)
			}
		case v.Type == gjson.Number:
			if b.Len() > 0 {
				b.WriteByte('\n')
			}
			b.WriteString(v.Raw)
		case v.IsArray():
			v.ForEach(func(_, e gjson.Result) bool {
				walk(e, depth+1)
				return true
			})
		case v.IsObject():
			binary := v.Get("type").String() == "base64"
			v.ForEach(func(k, e gjson.Result) bool {
				switch k.Str {
				case "type", "id", "call_id", "tool_use_id", "media_type", "mime_type", "file_id", "signature",
					"encrypted_content", "cache_control", "status", "file_data":
					return true
				case "data":
					if binary {
						return true
					}
				}
				if keys {
					if b.Len() > 0 {
						b.WriteByte('\n')
					}
					b.WriteString(k.Str)
				}
				walk(e, depth+1)
				return true
			})
		}
	}
	walk(v, depth)
	return b.String()
}

const maxCollectDepth = 32
