package flow

import (
	"strings"

	"github.com/tidwall/gjson"
)

// Role is who wrote a text of the conversation.
type Role uint8

// The roles of texts.
const (
	// RoleUser: a user message's text.
	RoleUser Role = iota + 1
	// RoleApp: the app's system and developer messages and instructions.
	RoleApp
	// RoleAssistant: the model's own text.
	RoleAssistant
)

// Output is a tool's output as the conversation carries it.
type Output struct {
	// Text is every string of the output that a reader could take a value from, joined by line
	// breaks (JSONText of the output's value).
	Text string
	// Doc is the document the tool returned: a string output as it is, or the text of its text
	// parts joined; "" when the output has no text (an image). Paths of a tool's trusted fields are
	// read in it (as JSON, else YAML).
	Doc string
	// Server is the label of the MCP server that answered ("" for other tools): the output's source
	// is then mcp:Server.
	Server string
}

// Transcript is a request's conversation in a form no wire format shapes: the texts, tool calls and
// tool outputs in order, each labelled by who wrote it. A surface reads its request body into one
// (outputs are matched to their calls by id here, the same for every surface); Policy.Analyze reads
// it. A Transcript is built by one goroutine and then only read (but for memo, which is safe for
// concurrent use).
type Transcript struct {
	segments  []Segment
	calls     []HistoryCall
	ids       map[string]string // call id -> tool name
	servers   map[string]string // call id -> MCP server label
	dup       map[string]bool   // call ids given to more than one call
	legacy    map[string]bool   // names of legacy function calls
	unseen    string
	inHistory bool
	// memo keeps what the indexes of the conversations read from this transcript read of its texts.
	memo *textMemo
}

// NewTranscript returns an empty transcript.
func NewTranscript() *Transcript {
	return &Transcript{ids: map[string]string{}, servers: map[string]string{}, dup: map[string]bool{}, legacy: map[string]bool{}, memo: &textMemo{}}
}

// History marks the parts added next as history the body does not carry (a Responses conversation
// continued by id, from the surface's record), or, with false, as the body's own.
func (t *Transcript) History(on bool) { t.inHistory = on }

// SetUnseen records that part of the history is not visible, and why (previous_response_id,
// conversation, item_reference); the first reason stays.
func (t *Transcript) SetUnseen(why string) {
	if t.unseen == "" {
		t.unseen = why
	}
}

// Unseen says why part of the history is not visible; "" when all of it is.
func (t *Transcript) Unseen() string { return t.unseen }

// Segments returns the transcript's texts and outputs in order.
func (t *Transcript) Segments() []Segment { return t.segments }

// Calls returns the transcript's tool calls in order.
func (t *Transcript) Calls() []HistoryCall { return t.calls }

// Text adds a text of message msg (-1 for instructions and top-level system prompts).
func (t *Transcript) Text(r Role, text string, msg int) {
	k := SourceUser
	switch r {
	case RoleApp:
		k = SourceApp
	case RoleAssistant:
		k = SourceAssistant
	}
	t.add(Source{Kind: k}, text, msg)
}

// Attachment adds the text of an attachment of a user or app message (an image, a file, a
// document): the runtime context's kind of source, never trusted.
func (t *Transcript) Attachment(text string, msg int) { t.add(Source{Kind: SourceContext}, text, msg) }

// Untrusted adds a part the surface cannot place (an unknown role or item type): an output whose
// call is not known.
func (t *Transcript) Untrusted(text string, msg int) { t.add(Source{Kind: SourceTool}, text, msg) }

// Call adds a tool call with its id ("" for a built-in tool without one) and raw argument JSON text
// (nil for a built-in tool); server is the MCP server's label for an MCP call, else "".
func (t *Transcript) Call(tool, id string, args []byte, server string, msg int) {
	t.calls = append(t.calls, HistoryCall{Tool: tool, ID: id, Args: args, Message: msg, InHistory: t.inHistory})
	if id == "" {
		return
	}
	if _, seen := t.ids[id]; seen {
		t.dup[id] = true
	}
	t.ids[id], t.servers[id] = tool, server
}

// LegacyCall adds a legacy function call, which has no id: its output names the function
// (LegacyOutput).
func (t *Transcript) LegacyCall(tool string, args []byte, msg int) {
	t.calls = append(t.calls, HistoryCall{Tool: tool, Args: args, Message: msg, InHistory: t.inHistory})
	t.legacy[tool] = true
}

// Output adds the output answering the call with the given id: tool:? when that call is not in the
// transcript, or its id was given to more than one call; an MCP call's output is mcp:SERVER.
func (t *Transcript) Output(id string, out Output, msg int) {
	tool, server := "", out.Server
	if id != "" && !t.dup[id] {
		tool = t.ids[id]
		if s := t.servers[id]; s != "" {
			server = s
		}
	}
	t.output(tool, server, out, msg)
	t.segments[len(t.segments)-1].callID = id
}

// LegacyOutput adds the output of a legacy function call, which names its function: tool:? when no
// legacy call of that name is in the transcript.
func (t *Transcript) LegacyOutput(name string, out Output, msg int) {
	if !t.legacy[name] {
		name = ""
	}
	t.output(name, "", out, msg)
}

// CallOutput adds the output answering a call known by its place rather than an id (Gemini's
// matching by name and order): the call's tool ("" for tool:?) and raw arguments (what the output
// may echo of them is not the output's; see index.echo).
func (t *Transcript) CallOutput(tool string, args []byte, out Output, msg int) {
	t.output(tool, out.Server, out, msg)
	if tool != "" {
		t.segments[len(t.segments)-1].callArgs = args
	}
}

// ToolOutput adds output that a tool's own item carries (a built-in tool's results, an MCP call
// with its output): its source is the named tool, or mcp:SERVER.
func (t *Transcript) ToolOutput(tool string, out Output, msg int) {
	t.output(tool, out.Server, out, msg)
}

// LabelServers makes the outputs of calls that an MCP server ran the source mcp:SERVER: serverOf
// names the server of a call by its tool and raw arguments ("" when no server ran it). It is how a
// call the model made and the agent executed through promptgate's MCP door is known as that
// server's when its output comes back. A call whose id two calls share, or whose output is already
// an MCP server's, is left as it is. Call it once the transcript is complete.
func (t *Transcript) LabelServers(serverOf func(tool string, args []byte) string) {
	var label map[string]string
	for _, c := range t.calls {
		if c.ID == "" || t.dup[c.ID] || t.servers[c.ID] != "" {
			continue
		}
		if s := serverOf(c.Tool, c.Args); s != "" {
			if label == nil {
				label = map[string]string{}
			}
			label[c.ID], t.servers[c.ID] = s, s
		}
	}
	for i := range t.segments {
		seg := &t.segments[i]
		if s, ok := label[seg.callID]; ok && seg.callID != "" && seg.Source.Kind == SourceTool {
			seg.Source = Source{Kind: SourceMCP, Tool: s}
		}
	}
}

// LabelServerTexts labels as an MCP server's each user text that the server wrote: writerOf names
// the server that wrote the text for the client to hand its model (a sampling request's message, a
// prompt's, a resource's contents), "" for none. A client sends such a text as the user's; it is
// the server's, and never the user's confirmation.
func (t *Transcript) LabelServerTexts(writerOf func(text string) string) {
	for i := range t.segments {
		seg := &t.segments[i]
		if seg.Source.Kind != SourceUser || seg.Text == "" {
			continue
		}
		if s := writerOf(seg.Text); s != "" {
			seg.Source = Source{Kind: SourceMCP, Tool: s}
		}
	}
}

func (t *Transcript) output(tool, server string, out Output, msg int) {
	src := Source{Kind: SourceTool, Tool: tool}
	if server != "" {
		src = Source{Kind: SourceMCP, Tool: server}
	}
	t.segments = append(t.segments, Segment{Source: src, Text: out.Text, Doc: out.Doc, Message: msg, InHistory: t.inHistory})
}

func (t *Transcript) add(src Source, text string, msg int) {
	t.segments = append(t.segments, Segment{Source: src, Text: text, Message: msg, InHistory: t.inHistory})
}

// JSONStrings gathers the strings and numbers of a JSON value, joined by line breaks, and with keys
// set the keys of its objects too (a key whose value is too deep to read included). leave, when not nil, leaves a value out (with its key, in an
// object): obj is the object that holds it under key (the zero Result, and "", for the value itself
// and an array's elements). Nesting deeper than depth levels is left out. What a value's text is
// for a surface (which members of its content parts are identifiers or payloads) is the surface's
// leave.
func JSONStrings(v gjson.Result, keys bool, depth int, leave func(obj gjson.Result, key string, v gjson.Result) bool) string {
	var b strings.Builder
	jsonStrings(&b, gjson.Result{}, "", v, keys, depth, leave)
	return b.String()
}

func jsonStrings(b *strings.Builder, obj gjson.Result, key string, v gjson.Result, keys bool, depth int,
	leave func(obj gjson.Result, key string, v gjson.Result) bool) {
	if leave != nil && leave(obj, key, v) {
		return
	}
	line := func(s string) {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(s)
	}
	if obj.Exists() && keys {
		line(key)
	}
	switch {
	case depth < 0:
	case v.Type == gjson.String:
		line(v.Str)
	case v.Type == gjson.Number:
		line(v.Raw)
	case v.IsArray():
		v.ForEach(func(_, e gjson.Result) bool {
			jsonStrings(b, gjson.Result{}, "", e, keys, depth-1, leave)
			return true
		})
	case v.IsObject():
		v.ForEach(func(k, e gjson.Result) bool {
			jsonStrings(b, v, k.Str, e, keys, depth-1, leave)
			return true
		})
	}
}

const maxCollectDepth = 32
