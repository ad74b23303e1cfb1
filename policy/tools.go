package policy

import (
	"fmt"
	"slices"

	"github.com/promptgate/promptgate/proxy/config"
)

// Removal reasons, stable strings shown in X-Promptgate-Tools-Removed decisions, the preview and audit.
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
	// Name is the tool's name exactly as declared (function name, custom tool name, or a built-in tool's type).
	Name        string
	Description string
	// Schema is the raw JSON Schema of its arguments, nil when none was declared.
	Schema []byte
	// Aliases are other names of the same tool (the versions of a built-in tool type, such as web_search and
	// web_search_preview). The tool is kept only under its Name's allowlist entry, and is removed when any of
	// them is denied, switched off, or restricted by its access policy: a client cannot get around an
	// operator's removal by picking another version of the tool.
	Aliases []string
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
	Config   map[string]config.Tool
	Override Enablement // may be nil
}

// Filter splits the declared tools into kept and removed: allowed = the protocol's allowlist ∩ runtime
// enablement ∩ each tool's access policy. The order of kept tools is the declared order.
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
		kept = append(kept, t)
	}
	return kept, removed
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

// removes is why the operator removes a tool name whatever the allowlist says: the protocol's deny list, the
// runtime enablement, the tool's access policy; "" when none does.
func (e *Effective) removes(name string, access ToolAccess) string {
	if anyGlob(e.deny, name) {
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

// anyGlob reports whether name matches one of the names or globs; "*" matches every name.
func anyGlob(globs []string, name string) bool {
	for _, g := range globs {
		if g == "*" || globMatch(g, name) {
			return true
		}
	}
	return false
}
