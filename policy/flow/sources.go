package flow

import (
	"fmt"
	"path"
	"strings"

	"github.com/promptgate/promptgate/policy/vet"
)

// SourceKind is where a piece of the conversation came from.
type SourceKind uint8

// The kinds of source.
const (
	// SourceUser: the user's messages. Trusted.
	SourceUser SourceKind = iota + 1
	// SourceApp: the app's system and developer messages, Responses instructions. Trusted.
	SourceApp
	// SourceAssistant: the model's own text. Never a source for provenance: the model can copy an
	// attacker's text into its own words, so its text proves nothing about where a value came from.
	SourceAssistant
	// SourceTool: a tool's output. Untrusted unless toolOutputs.trusted names the tool.
	SourceTool
	// SourceContext: promptgate.context, plugin answers and attachments (images, files, documents).
	// Untrusted.
	SourceContext
	// SourceMCP: the output of an MCP server's tool, labelled by the server. Untrusted unless
	// toolOutputs.trusted names mcp:SERVER.
	SourceMCP
	// SourceList: a list the operator wrote (the protocol's sources, or a context source's answer
	// the operator marked as a list), labelled by its name. Trusted.
	SourceList
)

// Source labels a segment: its kind and, for a tool output, the tool's name ("" when the call the
// output answers cannot be found: "tool:?"), for an MCP output the server's label; and, for an
// output trusted in part (toolOutputs.trustedPaths), which part.
type Source struct {
	Kind SourceKind
	Tool string
	Part Part
}

// Part is which part of an output trusted in part a segment holds.
type Part uint8

// The parts of an output.
const (
	// PartWhole: the whole output (the zero value).
	PartWhole Part = iota
	// PartTrusted: the values at the output's trusted paths.
	PartTrusted
	// PartRest: everything else of the output, untrusted.
	PartRest
)

// String is the source's label: user, app, assistant, context, tool:NAME or tool:?.
func (s Source) String() string {
	switch s.Kind {
	case SourceUser:
		return "user"
	case SourceApp:
		return "app"
	case SourceAssistant:
		return "assistant"
	case SourceContext:
		return "context"
	case SourceTool:
		if s.Tool == "" {
			return "tool:?"
		}
		return "tool:" + s.Tool + s.Part.suffix()
	case SourceMCP:
		return "mcp:" + s.Tool + s.Part.suffix()
	case SourceList:
		return "list:" + s.Tool
	}
	return "unknown"
}

// suffix marks a part of an output in a source's label.
func (p Part) suffix() string {
	switch p {
	case PartTrusted:
		return " (trusted paths)"
	case PartRest:
		return " (rest)"
	}
	return ""
}

// label is the source's label for a reason or a notice: its tool name shown as vet.DisplayName
// shows names (quoted with escapes unless plain), so a name cannot break a line or pass for text.
func (s Source) label() string {
	switch {
	case s.Kind == SourceTool && s.Tool != "":
		return "tool:" + vet.DisplayName(s.Tool) + s.Part.suffix()
	case s.Kind == SourceMCP:
		return "mcp:" + vet.DisplayName(s.Tool) + s.Part.suffix()
	}
	return s.String()
}

// patKind is a kind of source pattern.
type patKind uint8

const (
	patUser patKind = iota + 1
	patApp
	patTrusted
	patUntrusted
	patContext
	patTool
	patUnknownTool
	patMCP
	patList
	patViolation
)

// srcPattern is one entry of a from or after list.
type srcPattern struct {
	kind patKind
	glob string // patTool, patMCP
	// widen: the list widens what counts as a source ('*' stops at '/', as in tools.allow);
	// otherwise it restricts ('/' is an ordinary character, as in tools.deny).
	widen bool
}

// String is the pattern as written.
func (p srcPattern) String() string {
	switch p.kind {
	case patUser:
		return "user"
	case patApp:
		return "app"
	case patTrusted:
		return "trusted"
	case patUntrusted:
		return "untrusted"
	case patContext:
		return "context"
	case patUnknownTool:
		return "tool:?"
	case patMCP:
		return "mcp:" + p.glob
	case patList:
		return "list:" + p.glob
	case patViolation:
		return "violation"
	}
	return "tool:" + p.glob
}

// parseSources reads a from list (widen) or an after list (!widen), reporting problems under field.
func parseSources(p *problems, field string, list []string, widen bool) []srcPattern {
	var out []srcPattern
	for i, s := range list {
		at := fmt.Sprintf("%s[%d]", field, i)
		sp := srcPattern{widen: widen}
		switch {
		case s == "user", s == "app", s == "trusted":
			if !widen {
				p.add(at, "%q is trusted text, which a flow rule does not react to: use untrusted, context or tool:NAME", s)
				continue
			}
			sp.kind = map[string]patKind{"user": patUser, "app": patApp, "trusted": patTrusted}[s]
		case s == "untrusted":
			if widen {
				p.add(at, `"untrusted" cannot be an allowed source: list the sources you accept, such as user, app or tool:get_contacts`)
				continue
			}
			sp.kind = patUntrusted
		case s == "violation":
			if widen {
				p.add(at, `"violation" is not a source: it triggers flow rules (after), it is no value's origin`)
				continue
			}
			sp.kind = patViolation
		case s == "context":
			sp.kind = patContext
		case s == "tool:?":
			sp.kind = patUnknownTool
		case strings.HasPrefix(s, "tool:"), strings.HasPrefix(s, "mcp:"):
			prefix, glob, _ := strings.Cut(s, ":")
			sp.kind, sp.glob = map[string]patKind{"tool": patTool, "mcp": patMCP}[prefix], glob
			if !p.checkSourceGlob(at, prefix, glob) {
				continue
			}
		case strings.HasPrefix(s, "list:"):
			sp.kind, sp.glob = patList, strings.TrimPrefix(s, "list:")
			if !widen {
				p.add(at, "%q is a list the operator wrote, which a flow rule does not react to: use untrusted, context or tool:NAME", s)
				continue
			}
			if !validListName(sp.glob) {
				p.add(at, "%q is not a list name: write list:NAME, NAME of letters, digits, _ . - as in toolCalls.sources", s)
				continue
			}
		case s == "assistant":
			p.add(at, `"assistant" is not a source: the model can copy an attacker's text into its own words; list user, app, trusted or tool:NAME`)
			continue
		default:
			if widen {
				p.add(at, "%q is not a source: use user, app, trusted, context, tool:NAME, tool:GLOB, tool:?, mcp:SERVER or list:NAME", s)
			} else {
				p.add(at, "%q is not a source: use untrusted, context, tool:NAME, tool:GLOB, tool:?, mcp:SERVER or violation", s)
			}
			continue
		}
		out = append(out, sp)
	}
	return out
}

// matches reports whether a segment of source src (trusted or not under the policy) is covered.
func (p srcPattern) matches(src Source, trusted bool) bool {
	switch p.kind {
	case patUser:
		return src.Kind == SourceUser
	case patApp:
		return src.Kind == SourceApp
	case patTrusted:
		return trusted
	case patUntrusted:
		return !trusted && src.Kind != SourceAssistant
	case patContext:
		return src.Kind == SourceContext
	case patUnknownTool:
		return src.Kind == SourceTool && src.Tool == ""
	case patList:
		return src.Kind == SourceList && src.Tool == p.glob
	case patTool, patMCP:
		want := SourceTool
		if p.kind == patMCP {
			want = SourceMCP
		}
		if src.Kind != want || src.Tool == "" {
			return false
		}
		if p.widen {
			return matchAllow(p.glob, src.Tool)
		}
		return matchCover(p.glob, src.Tool)
	}
	return false
}

// matchAllow matches a name against a glob of a list that widens what is allowed or trusted:
// path.Match's syntax, whose '*' and '?' stop at '/', so the list admits no more than it says.
func matchAllow(glob, name string) bool {
	if glob == name {
		return true
	}
	ok, err := path.Match(glob, name)
	return err == nil && ok
}

// matchCover matches a name against a glob of a list that restricts (a rule's tools): '/' is an
// ordinary character, so "send_*" covers "send_/x" too and the rule applies to no fewer tools than
// it says. '/' is handed to path.Match as a private-use rune, as policy's deny lists do.
func matchCover(glob, name string) bool {
	if glob == name {
		return true
	}
	const slash = "\uE000"
	ok, err := path.Match(strings.ReplaceAll(glob, "/", slash), strings.ReplaceAll(name, "/", slash))
	return err == nil && ok
}

// validListName reports whether s names a list: 1 to 64 letters, digits, '_', '.' and '-'.
func validListName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// checkSourceGlob reports the glob of a tool:GLOB or mcp:GLOB source that is empty or malformed.
func (p *problems) checkSourceGlob(at, prefix, glob string) bool {
	if glob == "" {
		if prefix == "mcp" {
			p.add(at, "names no MCP server: write mcp:SERVER_LABEL or mcp:GLOB such as mcp:*")
		} else {
			p.add(at, "names no tool: write tool:NAME or tool:GLOB such as tool:list_*")
		}
		return false
	}
	if _, err := path.Match(glob, ""); err != nil {
		p.add(at, "%q is not a valid glob (%v)", glob, err)
		return false
	}
	return true
}
