package assembly

import (
	"strings"
	"unicode/utf8"

	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/policy"
)

// Layers are the per-request contents of the layered prompt.
type Layers struct {
	// Rules are the protocol's rules (trusted, operator-written).
	Rules string
	// Application are the client's own system/developer texts, in order; empty when the protocol
	// drops them.
	Application []string
	// Directives are per-turn hints (protocol directives, trusted plugin directives), in order.
	Directives []string
	// Meta and Sources make up the runtime context JSON (untrusted data).
	Meta    ctxjson.Meta
	Sources []ctxjson.Source
	// Tools are the tools kept for the request, in declared order.
	Tools []policy.Tool
	// NativeTools is true when the client declared tools through the API: OUTPUT FORMAT blocks are
	// stripped.
	NativeTools bool
}

// Prompt is the result of Build.
type Prompt struct {
	// ContextMessage is the content of the second system message in the structured channel, else
	// "".
	ContextMessage string
	// ContextJSON is the runtime context line, whichever message it went into.
	ContextJSON      []byte
	ContextTruncated bool
	// DirectivesTruncated is true when directives were cut to the cap.
	DirectivesTruncated bool
	// DatamarkToolOutput tells the rewrite to datamark the conversation's tool output (Settings).
	DatamarkToolOutput bool
	// VetHostedMCP tells the rewrite to make the MCP servers the upstream runs ask for approval of
	// every call (the protocol's mcp.vetHostedCalls), for promptgate to answer.
	VetHostedMCP bool
	Sizes        Sizes
	// system is the one layered system message in pieces: the frame's, already escaped, and the
	// request's. It is joined only when asked for (System): the rewrite writes the pieces' escaping
	// straight into the upstream body (AppendSystemJSON).
	system []chunk
	// systemLen is the system message's length in bytes; systemValid, whether every piece is valid
	// UTF-8.
	systemLen   int
	systemValid bool
}

// NewPrompt is a Prompt whose system message is system, for a caller that builds none from a
// template.
func NewPrompt(system string) Prompt {
	return Prompt{system: []chunk{requestChunk(system)}, systemLen: len(system), systemValid: utf8.ValidString(system)}
}

// System is the content of the one layered system message.
func (p *Prompt) System() string {
	if len(p.system) == 1 {
		return p.system[0].text
	}
	var b strings.Builder
	b.Grow(p.systemLen)
	for _, c := range p.system {
		b.WriteString(c.text)
	}
	return b.String()
}

// SystemJSONSize is about the length of AppendSystemJSON's bytes, to size a buffer for them: exact
// for the frame's pieces, the request's with room for some escaping.
func (p *Prompt) SystemJSONSize() int {
	n := 2
	for _, c := range p.system {
		if c.esc != nil {
			n += len(c.esc)
		} else {
			n += len(c.text) + len(c.text)/8
		}
	}
	return n
}

// Sizes are counts of Unicode code points, as the preview reports them.
type Sizes struct {
	TemplateChars int            `json:"templateChars"`
	FilledChars   int            `json:"filledChars"`
	Blocks        map[string]int `json:"blocks"`
}

// Build fills a template with the layers. It never fails: every input has a defined rendering. A
// caller that builds many prompts of one template and protocol keeps the Frame (NewFrame) and calls
// its Build.
func Build(t *Template, l Layers, s Settings) Prompt {
	return NewFrame(t, l, s).Build(l, s)
}

// AppendSystemJSON appends System as a JSON string, the bytes AppendJSONString gives: the frame's
// pieces are escaped already, the request's are escaped here.
func (p *Prompt) AppendSystemJSON(dst []byte) []byte {
	if !p.systemValid {
		// A piece of invalid UTF-8 may end inside a sequence that the next piece completes: the
		// whole text is escaped at once.
		return AppendJSONString(dst, p.System())
	}
	dst = append(dst, '"')
	for _, c := range p.system {
		if c.esc != nil {
			dst = append(dst, c.esc...)
		} else {
			dst = appendEscaped(dst, c.text)
		}
	}
	return append(dst, '"')
}

// renderApplication joins the client's system texts, each made safe to sit in the system message.
func renderApplication(texts []string) string {
	var parts []string
	for _, t := range texts {
		t = strings.TrimSpace(NeutralizeHeaders(RevealHidden(t)))
		if t != "" {
			parts = append(parts, t)
		}
	}
	return strings.Join(parts, "\n\n")
}

// renderDirectives puts each directive on a line of its own, under a cap of max code points; a
// directive that does not fit whole is cut with "…" and the rest dropped.
func renderDirectives(ds []string, max int) (string, bool) {
	if max <= 0 {
		return "", len(ds) > 0
	}
	var b strings.Builder
	n := 0
	for _, d := range ds {
		d = strings.TrimSpace(OneLine(RevealHidden(d)))
		if d == "" {
			continue
		}
		line := "- " + d
		sep := 0
		if b.Len() > 0 {
			sep = 1
		}
		l := utf8.RuneCountInString(line)
		if n+sep+l > max {
			room := max - n - sep
			if room > 3 {
				if b.Len() > 0 {
					b.WriteByte('\n')
				}
				b.WriteString(cutRunes(line, room-1))
				b.WriteString("…")
			}
			return b.String(), true
		}
		if sep == 1 {
			b.WriteByte('\n')
		}
		b.WriteString(line)
		n += sep + l
	}
	return b.String(), false
}

// Tool definition modes of PROMPT_TOOL_DEFS_MODE.
const (
	ToolDefsFull    = "full"
	ToolDefsMinimal = "minimal"
)

// renderTools lists the kept tools: "- name: description" (full) or "- name" (minimal).
func renderTools(tools []policy.Tool, mode string) string {
	var b strings.Builder
	for i, t := range tools {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("- ")
		b.WriteString(OneLine(RevealHidden(t.Name)))
		if d := strings.TrimSpace(OneLine(RevealHidden(t.Description))); d != "" && mode != ToolDefsMinimal {
			b.WriteString(": ")
			b.WriteString(d)
		}
	}
	return b.String()
}

func cutRunes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	i := 0
	for j := range s {
		if i == n {
			return s[:j]
		}
		i++
	}
	return s
}
