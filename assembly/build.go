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
	// Application are the client's own system/developer texts, in order; empty when the protocol drops them.
	Application []string
	// Directives are per-turn hints (protocol directives, trusted plugin directives), in order.
	Directives []string
	// Meta and Sources make up the runtime context JSON (untrusted data).
	Meta    ctxjson.Meta
	Sources []ctxjson.Source
	// Tools are the tools kept for the request, in declared order.
	Tools []policy.Tool
	// NativeTools is true when the client declared tools through the API: OUTPUT FORMAT blocks are stripped.
	NativeTools bool
}

// Prompt is the result of Build.
type Prompt struct {
	// System is the content of the one layered system message.
	System string
	// ContextMessage is the content of the second system message in the structured channel, else "".
	ContextMessage string
	// ContextJSON is the runtime context line, whichever message it went into.
	ContextJSON      []byte
	ContextTruncated bool
	// DirectivesTruncated is true when directives were cut to the cap.
	DirectivesTruncated bool
	// DatamarkToolOutput tells the rewrite to datamark the conversation's tool output (Settings).
	DatamarkToolOutput bool
	Sizes              Sizes
	// systemJSON is System as a JSON string, made by Build from the frame's escaped text, for the System
	// it was made of (systemOf; a System changed after Build is escaped anew).
	systemJSON []byte
	systemOf   string
}

// Sizes are counts of Unicode code points, as the preview reports them.
type Sizes struct {
	TemplateChars int            `json:"templateChars"`
	FilledChars   int            `json:"filledChars"`
	Blocks        map[string]int `json:"blocks"`
}

// Build fills a template with the layers. It never fails: every input has a defined rendering. A caller
// that builds many prompts of one template and protocol keeps the Frame (NewFrame) and calls its Build.
func Build(t *Template, l Layers, s Settings) Prompt {
	return NewFrame(t, l, s).Build(l, s)
}

// AppendSystemJSON appends System as a JSON string, the bytes AppendJSONString gives; Build has them ready.
func (p *Prompt) AppendSystemJSON(dst []byte) []byte {
	if p.systemJSON != nil && p.systemOf == p.System {
		return append(dst, p.systemJSON...)
	}
	return AppendJSONString(dst, p.System)
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

// renderDirectives puts each directive on a line of its own, under a cap of max code points; a directive
// that does not fit whole is cut with "…" and the rest dropped.
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
