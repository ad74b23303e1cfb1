package policy

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// Removal reasons, stable strings shown in X-Promptgate-Tools-Removed decisions, the preview and
// audit.
const (
	ReasonNotAllowlisted  = "not in the protocol's allowlist"
	ReasonDenied          = "denied by the protocol"
	ReasonDisabled        = "disabled by the operator"
	ReasonWrongProtocol   = "not allowed in this protocol by its access policy"
	ReasonMissingScope    = "the protocol lacks the tool's scope"
	ReasonNoName          = "tool has no name"
	ReasonDuplicateName   = "duplicate tool name"
	ReasonWorkflowNarrows = "not in the workflow's allowlist"
)

// Tool is one tool the client declared, in any API surface.
type Tool struct {
	// Name is the tool's name exactly as declared (function name, custom tool name, or a built-in
	// tool's type).
	Name        string
	Description string
	// Schema is the raw JSON Schema of its arguments, nil when none was declared.
	Schema []byte
	// Aliases are other names of the same tool (the versions of a built-in tool type, such as
	// web_search and web_search_preview). The tool is kept only under its Name's allowlist entry,
	// and is removed when any of them is denied, switched off, or restricted by its access policy:
	// a client cannot get around an operator's removal by picking another version of the tool.
	Aliases []string
	// UpstreamOnly marks a tool the upstream runs itself and that the request declares no function
	// for (Chat Completions' web_search_options): it is kept or removed like any tool, but its name
	// admits no tool call in the response, since the model cannot call it through the client.
	UpstreamOnly bool
}

// OverrideLister is an Enablement that can list the tools it has an override for (set or not);
// Restriction needs it to know whether a kill switch applies to any tool at all.
type OverrideLister interface {
	OverriddenTools() []string
}

// Removal is a tool taken out of a request, and why.
type Removal struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// Enablement answers the operator's runtime override for a tool: set is false when there is none.
type Enablement interface {
	ToolEnabled(name string) (enabled, set bool)
}

// ToolAccess is the deployment's tool policy: the config's tools section plus runtime overrides.
type ToolAccess struct {
	Config   map[string]ToolConfig
	Override Enablement // may be nil
}

// Filter splits the declared tools into kept and removed: allowed = the protocol's allowlist ∩
// runtime enablement ∩ each tool's access policy. The order of kept tools is the declared order.
func (e *Effective) Filter(tools []Tool, access ToolAccess) (kept []Tool, removed []Removal) {
	seen := make(map[string]bool, len(tools))
	for _, t := range tools {
		reason := ""
		switch {
		case t.Name == "":
			reason = ReasonNoName
		case seen[t.Name]:
			reason = ReasonDuplicateName
		default:
			reason = e.why(t.Name, access)
			for _, a := range t.Aliases {
				if reason != "" {
					break
				}
				if r := e.removes(a, access); r != "" {
					reason = fmt.Sprintf("%s (as %s)", r, a)
				}
			}
		}
		if t.Name != "" {
			seen[t.Name] = true
		}
		if reason != "" {
			removed = append(removed, Removal{Name: t.Name, Reason: reason})
			continue
		}
		if kept == nil {
			kept = make([]Tool, 0, len(tools)) // one allocation for every tool kept
		}
		kept = append(kept, t)
	}
	return kept, removed
}

// Restriction says why the protocol and the operator's tool policy might remove some tool of this
// request, whatever its name: an allowlist other than "*" (at any level), a deny list, or a tool
// that a kill switch or an access policy removes in this protocol. It is "" only where every tool
// the client could use is allowed: what a request whose tools promptgate cannot see (a stored
// prompt) needs to be forwarded. An Override that cannot list its tools counts as a restriction
// (fail closed).
func (e *Effective) Restriction(access ToolAccess) string {
	for i, level := range e.allow {
		if !slices.Contains(level, "*") {
			if i > 0 {
				return fmt.Sprintf("workflow %q allows only the tools it lists", e.ID)
			}
			return fmt.Sprintf("protocol %q allows only the tools it lists", e.BaseID)
		}
	}
	if len(e.deny) > 0 {
		return fmt.Sprintf("protocol %q denies tools (%s)", e.ID, strings.Join(e.deny, ", "))
	}
	names := slices.Sorted(maps.Keys(access.Config))
	if access.Override != nil {
		l, ok := access.Override.(OverrideLister)
		if !ok {
			return "the operator's runtime tool switches cannot be listed"
		}
		names = append(names, l.OverriddenTools()...)
	}
	for _, n := range names {
		if r := e.removes(n, access); r != "" {
			return fmt.Sprintf("tool %q is %s", n, r)
		}
	}
	return ""
}

// Allowed reports whether one tool name is allowed, with the reason when it is not.
func (e *Effective) Allowed(name string, access ToolAccess) (bool, string) {
	r := e.why(name, access)
	return r == "", r
}

func (e *Effective) why(name string, access ToolAccess) string {
	for i, level := range e.allow {
		if !anyGlob(level, name) {
			if i > 0 {
				return ReasonWorkflowNarrows
			}
			return ReasonNotAllowlisted
		}
	}
	return e.removes(name, access)
}

// removes is why the operator removes a tool name whatever the allowlist says: the protocol's deny
// list, the runtime enablement, the tool's access policy; "" when none does.
func (e *Effective) removes(name string, access ToolAccess) string {
	if anyDenied(e.deny, name) {
		return ReasonDenied
	}
	enabled := true
	if c, ok := access.Config[name]; ok && c.Enabled != nil {
		enabled = *c.Enabled
	}
	if access.Override != nil {
		if v, set := access.Override.ToolEnabled(name); set {
			enabled = v
		}
	}
	if !enabled {
		return ReasonDisabled
	}
	if c, ok := access.Config[name]; ok {
		if len(c.AllowedProtocols) > 0 && !slices.Contains(c.AllowedProtocols, e.ID) && !slices.Contains(c.AllowedProtocols, e.BaseID) {
			return ReasonWrongProtocol
		}
		if c.Scope != "" && !hasScope(e.Scope, c.Scope) {
			return fmt.Sprintf("%s (%s)", ReasonMissingScope, c.Scope)
		}
	}
	return ""
}

// anyGlob reports whether name matches one of the names or globs of an allowlist; "*" matches every
// name. It uses path.Match, whose '*' and '?' stop at '/': an allowlist admits no more than it says
// (search_* does not admit search_a/b).
func anyGlob(globs []string, name string) bool {
	for _, g := range globs {
		if g == "*" || globMatch(g, name) {
			return true
		}
	}
	return false
}

// anyDenied reports whether name matches one of the names or globs of a deny list. Unlike anyGlob,
// '/' is an ordinary character here (toolGlobMatch): a deny list removes no less than it says
// (delete_* removes delete_/all too). Both ways the ambiguity falls on the side of removing the
// tool.
func anyDenied(globs []string, name string) bool {
	for _, g := range globs {
		if g == "*" || toolGlobMatch(g, name) {
			return true
		}
	}
	return false
}

// toolGlobMatch matches a tool name against a glob of path.Match's syntax (*, ?, [class], \
// escapes), except that '/' is an ordinary character: a tool name is not a path, and "delete_*" in
// a deny list must also catch "delete_/x" (path.Match's '*' stops at '/'). It is used for deny
// lists only (see anyDenied). '/' is handed to path.Match as a private-use rune in both the pattern
// and the name; a name that holds that rune itself can only be matched more often (removed), never
// less. A malformed pattern (refused when the protocol is stored) never matches.
func toolGlobMatch(pattern, name string) bool {
	if pattern == name {
		return true
	}
	const slash = "\uE000"
	m, err := path.Match(strings.ReplaceAll(pattern, "/", slash), strings.ReplaceAll(name, "/", slash))
	return err == nil && m
}
