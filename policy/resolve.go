package policy

import (
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/modules"
	"github.com/promptgate/promptgate/policy/vet"
)

// Error is a decision that refuses the request: a code (one of the Code constants), the message for
// the client and the request field it is about. The proxy decides the HTTP answer of each code.
type Error struct {
	Code    string
	Message string
	Param   string
}

func (e *Error) Error() string { return "policy: " + e.Message }

// Codes of Error.
const (
	// CodeInvalidRequest: the request's shape is wrong (a field of the wrong type, an unknown
	// extension key).
	CodeInvalidRequest = "invalid_request"
	// CodeUnknownProtocol: the request names a protocol or workflow that is not defined.
	CodeUnknownProtocol = "unknown_protocol"
	// CodeProtocolNotAllowed: the client may not choose the protocol it names.
	CodeProtocolNotAllowed = "protocol_not_allowed"
	// CodeToolChoiceNotAllowed: tool_choice names a tool the request may not use.
	CodeToolChoiceNotAllowed = "tool_choice_not_allowed"
)

func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Catalog gives the active protocol definitions of one snapshot.
type Catalog interface {
	// Protocol returns the active definition of id, or false.
	Protocol(id string) (*Protocol, bool)
}

// Request is what routing looks at.
type Request struct {
	Path   string
	Model  string
	Header http.Header
	// APIKeySHA256 is the lowercase hex sha256 of the client's API key, "" when none.
	APIKeySHA256 string
	// ClientProtocol and ClientWorkflow are the client's choice (header, else body field), "" when
	// none.
	ClientProtocol string
	ClientWorkflow string
	// Forced, when set, selects the protocol with the operator's authority (preview --protocol):
	// routes and client-selection checks are skipped.
	Forced string
}

// Effective is the protocol a request runs under: a protocol, or a workflow merged onto its base.
type Effective struct {
	// ID is the selected protocol, or the workflow when one applies; BaseID is the base protocol.
	ID, BaseID           string
	Version, BaseVersion int
	Workflow             bool
	Template             string
	Rules                string
	ClientSystem         string
	Directives           []string
	Modules              Modules
	Scope                []string
	OnViolation          vet.Mode
	Atomic               bool
	ArgRules             []vet.Rule
	// MCP is the protocol's policy for MCP traffic: the base's, made stricter by the workflow's.
	MCP MCP
	// Flow are the information-flow parts of the definitions: the base's, then the workflow's
	// (compile them together with flow.Compile).
	Flow []flow.Spec

	// allow holds one allowlist per level (base, then workflow); a tool must pass every level.
	allow [][]string
	deny  []string
}

// Router picks the protocol of a request. It is immutable and safe for concurrent use.
type Router struct {
	routes []Route
	def    string
}

// NewRouter builds a router from the policy part of the deployment config.
func NewRouter(cfg Config) *Router {
	def := cfg.DefaultProtocol
	if def == "" {
		def = DefaultProtocol
	}
	return &Router{routes: cfg.Routes, def: def}
}

// KeyRouted reports whether a route matches on the API key, the only use of Request.APIKeySHA256: a
// caller may leave the hash out where it is false.
func (r *Router) KeyRouted() bool {
	for _, rt := range r.routes {
		if rt.Match.APIKeySha256 != "" {
			return true
		}
	}
	return false
}

// Resolve chooses the protocol: the first matching route, the client's choice where the route
// allows it, else the default; then merges the workflow, if any. Errors are *Error.
func (r *Router) Resolve(req Request, cat Catalog) (*Effective, error) {
	base, wf, err := r.Select(req, cat)
	if err != nil {
		return nil, err
	}
	return Merge(base, wf), nil
}

// Select is Resolve without the merge: the base protocol and the workflow (nil when none) that
// Merge makes the effective protocol of. A caller that serves many requests on one catalog can keep
// Merge's result per pair, as both are fixed by the catalog.
func (r *Router) Select(req Request, cat Catalog) (base, wf *Protocol, err error) {
	id, clientMayChoose, routed := r.def, true, false
	for _, rt := range r.routes {
		if matches(rt.Match, req) {
			id, routed = rt.Protocol, true
			clientMayChoose = rt.AllowClientProtocol != nil && *rt.AllowClientProtocol
			break
		}
	}
	choose := func(want string) (*Protocol, error) {
		p, ok := cat.Protocol(want)
		if !ok {
			return nil, errorf(CodeUnknownProtocol, "unknown protocol %q", want)
		}
		if want == id {
			return p, nil // the client asks for what it would get anyway
		}
		if !clientMayChoose {
			return nil, errorf(CodeProtocolNotAllowed, "protocol %q may not be chosen by the client on this route", want)
		}
		if !p.AllowClientSelection {
			return nil, errorf(CodeProtocolNotAllowed, "protocol %q does not allow client selection", want)
		}
		return p, nil
	}

	var sel *Protocol
	switch {
	case req.Forced != "":
		p, ok := cat.Protocol(req.Forced)
		if !ok {
			return nil, nil, errorf(CodeUnknownProtocol, "unknown protocol %q", req.Forced)
		}
		sel = p
	case req.ClientProtocol != "":
		if sel, err = choose(req.ClientProtocol); err != nil {
			return nil, nil, err
		}
		// A workflow runs on its base, so the client must be allowed to choose that base too.
		if sel.Extends != "" && sel.ID != id {
			if _, err = choose(sel.Extends); err != nil {
				return nil, nil, err
			}
		}
	case req.ClientWorkflow != "" && clientMayChoose:
		// A workflow alone implies its base, as if the client had chosen the base.
		w, ok := cat.Protocol(req.ClientWorkflow)
		if !ok {
			return nil, nil, errorf(CodeUnknownProtocol, "unknown workflow %q", req.ClientWorkflow)
		}
		if w.Extends == "" {
			return nil, nil, errorf(CodeUnknownProtocol, "%q is not a workflow protocol (it has no extends)", w.ID)
		}
		if sel, err = choose(w.Extends); err != nil {
			return nil, nil, err
		}
	default:
		p, ok := cat.Protocol(id)
		if !ok {
			where := "the default protocol"
			if routed {
				where = "the protocol of the matching route"
			}
			return nil, nil, errorf(CodeUnknownProtocol, "%s %q is not defined", where, id)
		}
		sel = p
	}

	// A selected protocol that is itself a workflow runs on its base.
	if sel.Extends != "" {
		wf = sel
		base, ok := cat.Protocol(sel.Extends)
		if !ok {
			return nil, nil, errorf(CodeUnknownProtocol, "workflow %q extends unknown protocol %q", sel.ID, sel.Extends)
		}
		sel = base
	}
	if req.ClientWorkflow != "" && wf != nil && wf.ID != req.ClientWorkflow {
		return nil, nil, errorf(CodeUnknownProtocol, "the request names two workflows, %q as its protocol and %q as its workflow; name one", wf.ID, req.ClientWorkflow)
	}
	if req.ClientWorkflow != "" && wf == nil {
		w, ok := cat.Protocol(req.ClientWorkflow)
		if !ok {
			return nil, nil, errorf(CodeUnknownProtocol, "unknown workflow %q", req.ClientWorkflow)
		}
		if w.Extends == "" {
			return nil, nil, errorf(CodeUnknownProtocol, "%q is not a workflow protocol (it has no extends)", w.ID)
		}
		if w.Extends != sel.ID {
			return nil, nil, errorf(CodeProtocolNotAllowed, "workflow %q extends %q, not the request's protocol %q", w.ID, w.Extends, sel.ID)
		}
		wf = w
	}
	if sel.Extends != "" {
		return nil, nil, errorf(CodeUnknownProtocol, "workflow %q extends %q, itself a workflow; only one level of extends is supported", wf.ID, sel.ID)
	}
	return sel, wf, nil
}

// Merge builds the effective protocol of a base and its workflow (nil when none); a workflow's
// rules follow the base's and it only narrows. The result shares no backing array a caller could
// append into, so one Effective may serve many requests.
func Merge(base, wf *Protocol) *Effective {
	e := merge(base, wf)
	e.Directives, e.Scope, e.ArgRules, e.Flow = slices.Clip(e.Directives), slices.Clip(e.Scope), slices.Clip(e.ArgRules), slices.Clip(e.Flow)
	e.Modules.Off, e.allow, e.deny = slices.Clip(e.Modules.Off), slices.Clip(e.allow), slices.Clip(e.deny)
	return e
}

func merge(base, wf *Protocol) *Effective {
	e := &Effective{
		ID: base.ID, BaseID: base.ID, Version: base.Version, BaseVersion: base.Version,
		Template:     base.PromptTemplate.Base,
		Rules:        strings.TrimSpace(base.PromptTemplate.Overrides.Rules),
		ClientSystem: base.ClientSystem,
		Directives:   append([]string(nil), base.Directives...),
		Modules:      modulesOf(base.Scope, base.ID),
		Scope:        append([]string(nil), base.Scope...),
		OnViolation:  base.ToolCalls.OnViolation,
		Atomic:       base.ToolCalls.AtomicParallelCalls,
		MCP:          base.MCP,
		ArgRules:     append([]vet.Rule(nil), base.ToolCalls.Rules...),
		Flow:         []flow.Spec{base.ToolCalls.Spec},
		allow:        [][]string{base.Tools.Allow},
		deny:         append([]string(nil), base.Tools.Deny...),
	}
	if e.ClientSystem == "" {
		e.ClientSystem = ClientSystemKeep
	}
	if e.OnViolation == "" {
		e.OnViolation = vet.ModeRefuse
	}
	if wf == nil {
		return e
	}
	e.ID, e.Version, e.Workflow = wf.ID, wf.Version, true
	if wf.PromptTemplate.Base != "" {
		e.Template = wf.PromptTemplate.Base
	}
	if r := strings.TrimSpace(wf.PromptTemplate.Overrides.Rules); r != "" {
		if e.Rules != "" {
			e.Rules += "\n"
		}
		e.Rules += r
	}
	if wf.ClientSystem == ClientSystemDrop {
		e.ClientSystem = ClientSystemDrop
	}
	e.Directives = append(e.Directives, wf.Directives...)
	// A workflow can narrow the module mode, never widen it; toggles add up.
	wm := modulesOf(wf.Scope, base.ID)
	if hasModeScope(wf.Scope) && !wm.Mode.AtLeast(e.Modules.Mode) {
		e.Modules.Mode = wm.Mode
	}
	e.Modules.Off = append(e.Modules.Off, wm.Off...)
	e.Scope = intersectScope(e.Scope, wf.Scope)
	if stricter(wf.ToolCalls.OnViolation, e.OnViolation) {
		e.OnViolation = wf.ToolCalls.OnViolation
	}
	e.Atomic = e.Atomic || wf.ToolCalls.AtomicParallelCalls
	if r := wf.MCP.RequireModelCall; r != nil && *r {
		e.MCP.RequireModelCall = r // a workflow can require the join, never waive it
	}
	e.MCP.VetHostedCalls = e.MCP.VetHostedCalls || wf.MCP.VetHostedCalls
	e.Flow = append(e.Flow, wf.ToolCalls.Spec)
	// Rule ids are unique per definition; a workflow rule whose id the base already uses is renamed
	// "WORKFLOW/ID" so that both rules apply.
	ids := make(map[string]bool, len(e.ArgRules))
	for _, r := range e.ArgRules {
		ids[r.ID] = r.ID != ""
	}
	for _, r := range wf.ToolCalls.Rules {
		if r.ID != "" && ids[r.ID] {
			r.ID = wf.ID + "/" + r.ID
		}
		e.ArgRules = append(e.ArgRules, r)
	}
	if len(wf.Tools.Allow) > 0 {
		e.allow = append(e.allow, wf.Tools.Allow)
	}
	e.deny = append(e.deny, wf.Tools.Deny...)
	return e
}

func hasModeScope(scope []string) bool {
	for _, s := range scope {
		v, ok := strings.CutPrefix(s, "prompt_modules:")
		if _, isMode := modules.Parse(v); ok && isMode {
			return true
		}
	}
	return false
}

// intersectScope keeps the base's access scopes that the workflow also lists, when the workflow
// lists any (module entries aside), so a workflow cannot gain an access scope its base lacks.
func intersectScope(base, wf []string) []string {
	var wfAccess []string
	for _, s := range wf {
		if !strings.HasPrefix(s, "prompt_modules:") {
			wfAccess = append(wfAccess, s)
		}
	}
	if len(wfAccess) == 0 {
		return base
	}
	var out []string
	for _, s := range base {
		if strings.HasPrefix(s, "prompt_modules:") || hasScope(wfAccess, s) {
			out = append(out, s)
		}
	}
	return out
}

// stricter reports whether mode a is stricter than b (error > refuse > continue > audit).
func stricter(a, b vet.Mode) bool {
	rank := func(m vet.Mode) int {
		switch m {
		case vet.ModeError:
			return 4
		case vet.ModeRefuse:
			return 3
		case vet.ModeContinue:
			return 2
		case vet.ModeAudit:
			return 1
		}
		return 0
	}
	return rank(a) > rank(b)
}

func matches(m Match, req Request) bool {
	if m.APIKeySha256 != "" && m.APIKeySha256 != req.APIKeySHA256 {
		return false
	}
	if m.Model != "" && !globMatch(m.Model, req.Model) {
		return false
	}
	if m.Path != "" && !globMatch(m.Path, req.Path) {
		return false
	}
	for h, want := range m.Header {
		vals := req.Header.Values(h)
		ok := false
		for _, v := range vals {
			if globMatch(want, v) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// globMatch matches with path.Match; a malformed pattern (refused by config validation) never
// matches.
func globMatch(pattern, s string) bool {
	if pattern == s {
		return true
	}
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}
