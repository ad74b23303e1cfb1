package proxy

import (
	"net/http"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/mcpjoin"
	"github.com/promptgate/promptgate/store"
)

// Governance is the policy that a request outside the rewritten APIs runs under (the MCP door's):
// the protocol the router chooses for it — by route, API key or header, as for the rewritten APIs —
// on the definitions snapshot of that moment, with its compiled argument and information-flow rules
// and the snapshot's kill switches. It is read-only.
type Governance struct {
	// Protocol is the effective protocol.
	Protocol *policy.Effective
	access   policy.ToolAccess
	plan     *plan
	maxDepth int
	schemas  *vet.SchemaCache
}

// GovernInput is what routing reads of such a request.
type GovernInput struct {
	Path   string
	Header http.Header
	// Protocol, when set, selects the protocol with the operator's authority (a configured MCP
	// server's protocol), as a route does.
	Protocol string
}

// Govern chooses the protocol of a request outside the rewritten APIs. Errors are *policy.Error.
func (e *Engine) Govern(in GovernInput) (*Governance, error) {
	cat := e.defs.snapshot()
	req := policyRequest(Input{Path: in.Path, Header: in.Header, ForceProtocol: in.Protocol}, "", assembly.Extension{}, e.router.KeyRouted())
	base, wf, err := e.router.Select(req, cat)
	if err != nil {
		return nil, err
	}
	access := e.access
	access.Override = cat
	pl := cat.plan(base, wf)
	return &Governance{Protocol: pl.eff, access: access, plan: pl, maxDepth: e.limits.MaxJSONDepth, schemas: e.schemas}, nil
}

// Filter splits tools into those the protocol allows (allowlist ∩ enablement ∩ access policy) and
// those it removes, with the reason.
func (g *Governance) Filter(tools []policy.Tool) (kept []policy.Tool, removed []policy.Removal) {
	return g.Protocol.Filter(tools, g.access)
}

// Checker vets calls of one tool: its name allowed, its arguments one JSON object that satisfies
// schema (nil: any object) and the protocol's argument rules; judge, when not nil, judges the calls
// that pass. Where the argument rules do not compile, no call passes and err says why.
func (g *Governance) Checker(tool string, schema []byte, judge vet.Judge) (*vet.Checker, error) {
	allowed := map[string]bool{}
	if ok, _ := g.Protocol.Allowed(tool, g.access); ok && g.plan.rulesErr == nil {
		allowed[tool] = true
	}
	schemas := map[string][]byte{}
	if len(schema) > 0 {
		schemas[tool] = schema
	}
	return vet.NewChecker(vet.Policy{Allowed: allowed, Schemas: schemas, Rules: g.plan.rules, Mode: g.Protocol.OnViolation,
		MaxDepth: g.maxDepth, SchemaCache: g.schemas, Judge: judge}), g.plan.rulesErr
}

// Flow is the protocol's compiled information-flow policy; an error where its rules do not compile.
func (g *Governance) Flow() (*flow.Policy, error) { return g.plan.flow, g.plan.flowErr }

// PinSet is the active version of an MCP server's pinned tool definitions in the engine's current
// definitions snapshot (kept current by the store's watch, and served from the last snapshot while
// the store is unreachable); false when the server has none.
func (e *Engine) PinSet(server string) (store.Record, bool) { return e.defs.PinSet(server) }

// released tells the MCP door's join of a call that reached the client (allowed, confirmed, or let
// through in audit mode).
func (s *Server) released(x *exchange, d vet.Decision) {
	calls := s.opt.Engine.calls
	if calls == nil || d.Blocked() || len(d.Args) == 0 {
		return
	}
	digest, ok := mcpjoin.Digest(d.Args)
	if !ok {
		return
	}
	calls.Release(mcpjoin.Call{Tool: d.Tool, Digest: digest, Conversation: x.conversation}, x.prep.Protocol.ID)
}
