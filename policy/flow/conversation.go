package flow

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Segment is one piece of text of the conversation and its source.
type Segment struct {
	Source Source
	// Text is the segment's text: a message's text parts joined by line breaks, a tool output's
	// strings, the context's string values. It may be empty (an image, a web search's unseen
	// results).
	Text string
	// Doc is a tool output's document (Output.Doc); "" for other segments.
	Doc string
	// Message is the index of the message (Chat, Messages) or input item (Responses) it comes from,
	// counted in the history when InHistory is set; -1 for instructions, system and context.
	Message   int
	InHistory bool
	// callID is the id of the call a tool output answers ("" for other segments): LabelServers
	// finds the outputs of calls an MCP server ran by it.
	callID string
	// callArgs are the raw arguments of the call a tool output answers where it is known by its
	// place, not an id (CallOutput); nil otherwise.
	callArgs []byte
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

// Options are what the integration knows of a request beyond its transcript.
type Options struct {
	// Context are untrusted texts gathered for the request outside its messages: promptgate.context
	// (JSONText of it, keys included) and the plugins' answers.
	Context []string
	// Conversation is the id that binds confirmation codes to the conversation
	// (X-Promptgate-Conversation, else promptgate.conversation). "" binds them to a digest of the
	// first user message; with unseen history and no id, calls cannot be confirmed.
	Conversation string
	// Confirmer issues and verifies confirmation codes; nil blocks every call that needs one.
	Confirmer *Confirmer
	// Violations remembers the conversations in which a call broke a provenance, scan or flow rule,
	// for flow rules with after ["violation"]; nil remembers nothing beyond the request.
	Violations *Violations
	// User is the end user the request is for (X-Promptgate-User, promptgate.user), "" when not
	// known: without a conversation id, the memory of caught conversations tells conversations
	// apart by it and by their first user message.
	User string
	// Lists are operator lists the request brings beside the protocol's (list:NAME): what context
	// sources the operator marked as lists answered. Never anything the client sends.
	Lists map[string][]string
	// Codes are confirmation codes the app gives for this request beside the conversation (the
	// proxy's X-Promptgate-Confirm header, for apps with a button): each counts as a user's reply
	// to its notice. Text that is not a code is ignored; at most maxCandidates are read.
	Codes []string
	// Shadow judges the conversation for the record only (a shadow version's rules): Check spends
	// no confirmation code and writes nothing to Violations. A call whose rules ask for
	// confirmation is confirmed when a code the user gave is one of its valid codes (used or not),
	// else held.
	Shadow bool
}

// Conversation is one request's conversation under a policy. Check is safe for concurrent use;
// everything else is read-only once Analyze returns.
type Conversation struct {
	p        *Policy
	segments []Segment
	trusted  []bool
	calls    []HistoryCall
	unseen   string // why part of the history is not visible; "" when all of it is
	// unsplit says why outputs of tools trusted in part were left untrusted whole, one line each.
	unsplit   []string
	binding   string
	confirmer *Confirmer
	// violations remembers caught conversations across requests; caught says why this one is (""
	// when it is not), from the memory or from a call of this request.
	violations *Violations
	memKey     string // the conversation's key in violations: the binding, with the user where it is a digest
	caught     string
	codes      []code // the app's codes (Options.Codes)
	shadow     bool   // Options.Shadow

	typedOnce sync.Once
	typed     []code       // see typedCodes
	codeSteps atomic.Int64 // bytes and readings the code search went through, so tests can bound it

	mu   sync.Mutex
	made []string // tools of this response's calls that were let through, in order

	indexOnce sync.Once
	index     *index // see idx
	// fields are the indexes of tool outputs' fields, for learn mode (see fieldOf).
	fields fieldIndexes
	// memo is the transcript's: what its texts read as, shared by the conversations read from it.
	memo *textMemo
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

// Analyze reads the conversation of a transcript (a surface's reading of a request body), the
// context texts and the confirmation codes the app gave, for Check to judge calls against.
func (p *Policy) Analyze(t *Transcript, opt Options) (*Conversation, error) {
	if t == nil {
		return nil, errors.New("flow: analyze: no transcript")
	}
	c := &Conversation{p: p, confirmer: opt.Confirmer, unseen: t.unseen, calls: t.calls, memo: t.memo}
	c.segments = append(c.splitOutputs(t.segments), listSegments(opt.Lists)...)
	for _, text := range opt.Context {
		c.segments = append(c.segments, Segment{Source: Source{Kind: SourceContext}, Text: text, Message: -1})
	}
	c.trusted = make([]bool, len(c.segments))
	for i, seg := range c.segments {
		c.trusted[i] = p.trustedSource(seg.Source)
	}
	c.binding = c.bind(opt.Conversation)
	c.codes = appCodes(opt.Codes)
	c.violations = opt.Violations
	c.shadow = opt.Shadow
	c.memKey = c.binding
	if strings.HasPrefix(c.binding, "u:") {
		sum := sha256.Sum256([]byte(c.binding + "\x00" + opt.User))
		c.memKey = "m:" + hex.EncodeToString(sum[:16])
	}
	if opt.Violations.seen(c.memKey) {
		c.caught = "a call of this conversation was refused or held earlier"
	}
	return c, nil
}

// bind chooses the id that binds confirmation codes to the conversation: the client's conversation
// id, else a digest of the text of its first user message that has text. The app's messages are
// left out: where they stand differs between the turns of one conversation (a Responses
// continuation's replayed history puts a developer item before the instructions the client sends
// again).
func (c *Conversation) bind(explicit string) string {
	switch {
	case explicit != "":
		return "c:" + explicit
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

// splitOutputs returns the segments with each output of a tool trusted in part
// (toolOutputs.trustedPaths) split in two: the values at its trusted paths, and the rest,
// untrusted. An output that cannot be split stays whole and untrusted, and the conversation notes
// why (for the reasons of the rules it then fails).
func (c *Conversation) splitOutputs(segs []Segment) []Segment {
	var out []Segment // nil until an output is split, then a copy
	for i, seg := range segs {
		src := seg.Source
		var tr outputTrust
		if (src.Kind == SourceTool || src.Kind == SourceMCP) && src.Tool != "" && src.Part == PartWhole {
			tr = c.p.trustOf(src.Tool, src.Kind == SourceMCP)
		}
		if tr.whole || len(tr.paths) == 0 {
			if out != nil {
				out = append(out, seg)
			}
			continue
		}
		if out == nil {
			out = append(make([]Segment, 0, len(segs)+4), segs[:i]...)
		}
		sp := splitOutput(seg.Doc, tr.paths)
		if sp.problem != "" {
			c.unsplit = append(c.unsplit, fmt.Sprintf("the output of %s (message %d) is untrusted whole: %s", src.label(), seg.Message, sp.problem))
			seg.Source.Part = PartRest // all of it is the untrusted rest, which no allowed set counts
			out = append(out, seg)
			continue
		}
		rest := sp.rest
		if seg.Text != seg.Doc {
			rest += "\n" + seg.Text // what the output carries beside its document (attachments) is untrusted
		}
		trusted, untrusted := seg, seg
		trusted.Source.Part, trusted.Text = PartTrusted, strings.Join(sp.trusted, "\n")
		untrusted.Source.Part, untrusted.Text = PartRest, rest
		out = append(out, trusted, untrusted)
	}
	if out == nil {
		return slices.Clip(segs)
	}
	return out
}
