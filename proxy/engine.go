package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/mcpjoin"
	"github.com/promptgate/promptgate/proxy/surface"
	"github.com/promptgate/promptgate/proxy/surface/chat"
	"github.com/promptgate/promptgate/proxy/surface/gemini"
	"github.com/promptgate/promptgate/proxy/surface/messages"
	"github.com/promptgate/promptgate/proxy/surface/responses"
	"github.com/promptgate/promptgate/store"
)

// Request headers of promptgate; they are read here and never sent upstream.
const (
	HeaderProtocol     = surface.HeaderProtocol
	HeaderWorkflow     = "X-Promptgate-Workflow"
	HeaderUser         = "X-Promptgate-User"
	HeaderConversation = "X-Promptgate-Conversation"
)

// Response headers.
const (
	HeaderRequestID     = "X-Request-Id"
	HeaderUpstreamReqID = "X-Upstream-Request-Id"
	HeaderTemplate      = "X-Promptgate-Template"
	HeaderToolsRemoved  = "X-Promptgate-Tools-Removed"
	HeaderBlocked       = surface.HeaderBlocked
	HeaderContinued     = surface.HeaderContinued
)

// ContextSource gathers runtime context (the plugin host implements it). An error means a required
// source failed: the request is answered 503 context_unavailable.
type ContextSource interface {
	Gather(ctx context.Context, q gather.Query) (gather.Result, error)
}

// Engine turns a client request into the upstream request. The proxy listener, the admin preview
// and the `promptgate preview` command all run this same code. It is immutable once built, and safe
// for concurrent use.
type Engine struct {
	defs     *Definitions
	router   *policy.Router
	access   policy.ToolAccess
	settings assembly.Settings
	limits   Limits
	context  ContextSource // nil: only the request's own promptgate.context
	log      *slog.Logger
	// surfaces are the rewritten APIs (see surfaces); routes matches their routes, folded their
	// paths without regard to case (the disguised-route guard).
	surfaces       []surface.Surface
	routes, folded *routeTable
	// schemas keeps the compiled tool schemas that clients declare, shared by every response's
	// checker.
	schemas *vet.SchemaCache
	// calls joins the model's calls to the MCP door's (EngineOptions.Calls); nil when there is no
	// door.
	calls *mcpjoin.Record
}

// EngineOptions configure NewEngine.
type EngineOptions struct {
	// Defs are the definitions the engine serves. Required.
	Defs *Definitions
	// Policy is the routing and tool-access part of the deployment config.
	Policy policy.Config
	// Settings are the assembly settings (the PROMPT_* environment and the config's security
	// section).
	Settings assembly.Settings
	// Limits bound a request; zero values mean the defaults.
	Limits Limits
	// Context gathers runtime context; nil means only the request's own promptgate.context is used.
	Context ContextSource
	// Log receives the engine's debug lines; nil discards.
	Log *slog.Logger
	// StoredResponses bounds the per-instance memory of Responses answers and of stored chat
	// completions (see surface/responses and surface/chat); 0 means 10,000.
	StoredResponses int
	// Calls, when not nil, is told every model call released to the client, for the MCP door to
	// match its tools/call against, and names the MCP server that ran a call whose output the
	// conversation carries.
	Calls *mcpjoin.Record
}

// NewEngine builds the engine of o.
func NewEngine(o EngineOptions) (*Engine, error) {
	if o.Defs == nil {
		return nil, errors.New("proxy: NewEngine needs the definitions")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	o.Limits.ApplyDefaults()
	sfs := surfaces(o)
	return &Engine{
		defs: o.Defs, router: policy.NewRouter(o.Policy), access: policy.ToolAccess{Config: o.Policy.Tools},
		settings: o.Settings, limits: o.Limits, context: o.Context, log: o.Log,
		surfaces: sfs, routes: newRouteTable(sfs, false), folded: newRouteTable(sfs, true),
		schemas: vet.NewSchemaCache(vet.DefaultSchemaCacheSize), calls: o.Calls,
	}, nil
}

// surfaces is the table of the rewritten APIs, in the order their routes are listed. A new surface
// is one package under proxy/surface and one line here.
func surfaces(o EngineOptions) []surface.Surface {
	return []surface.Surface{
		chat.New(chat.Options{Remember: o.StoredResponses}),
		responses.New(responses.Options{Remember: o.StoredResponses}),
		messages.Surface{},
		gemini.Surface{},
	}
}

// Limits are the engine's limits, defaults filled in.
func (e *Engine) Limits() Limits { return e.limits }

// Input is one client request.
type Input struct {
	// Path is the request's path; Prepare and Preview also take it with its query (a Gemini
	// stream's ?alt=sse).
	Path string
	// Query is the request's query (nil for none).
	Query  url.Values
	Header http.Header
	Body   []byte
	// ForceProtocol selects the protocol with the operator's authority (preview --protocol).
	ForceProtocol string
	// Confirmer issues and checks the confirmation codes of the request's held calls (the
	// server's); nil blocks every call that would need one (a preview checks no call).
	Confirmer *flow.Confirmer
	// Violations remembers caught conversations (the server's); nil remembers nothing beyond the
	// request.
	Violations *flow.Violations
	// Learn reads the conversation for learn mode where the protocol runs in audit mode or has a
	// version in shadow (the server sets it when it keeps what it learns).
	Learn bool
	// Candidate, for Preview only, is a stored version of a protocol or template that the request
	// is prepared with as if it were active (nil: the active definitions). Prepare ignores it.
	Candidate *store.Record
}

// Prepared is everything decided for one request, and the exact upstream body.
type Prepared struct {
	Body      []byte
	Model     string
	Stream    bool
	Protocol  *policy.Effective
	Template  *assembly.Template
	Prompt    assembly.Prompt
	Kept      []policy.Tool
	Removed   []policy.Removal
	Extension assembly.Extension
	// StoredPrompt is the id of the stored prompt a Responses request names, "" when none:
	// forwarded only where every tool is allowed (Effective.Restriction), and recorded as a
	// decision.
	StoredPrompt string
	// Notes say what the surface did to continue the conversation (for the log); nil when nothing.
	Notes []string
	// Surface is the API of the request.
	Surface surface.Surface
	// FlowPolicy is the protocol's information-flow rules; Flow is the request's conversation as
	// they read it, nil when there is no rule.
	FlowPolicy *flow.Policy
	Flow       *flow.Conversation
	// client is the body the client sent.
	client []byte
	// cat is the definitions snapshot the request was prepared on (nil when built elsewhere).
	cat *catalog
	// plan is what the snapshot derived from the request's effective protocol (nil when built
	// elsewhere).
	plan *plan
	// schemas is the engine's cache of compiled tool schemas.
	schemas *vet.SchemaCache
	// Shadow is what the protocol's version in shadow makes of the request; nil when none is in
	// shadow.
	Shadow *Shadow
	// learn is the conversation as learn mode reads it; nil when the request is not learned from.
	learn *flow.Conversation
	// templateRef is Template's templateRef, made once per plan; "" in a Prepared made outside the
	// engine.
	templateRef string
}

// templateHeader is the X-Promptgate-Template value of the request: the template's name and version.
func (p *Prepared) templateHeader() string {
	if p.templateRef != "" {
		return p.templateRef
	}
	return templateRef(p.Template)
}

// Policy is the tool-call policy of the request: the kept tools (not those the upstream runs
// itself, whose name admits no call), their schemas, the protocol's argument rules and mode. Where
// the rules do not compile (they were validated when the protocol was stored), no call may pass;
// err says why.
func (p *Prepared) Policy(maxDepth int) (pol vet.Policy, err error) {
	var allowed map[string]bool
	var schemas map[string][]byte
	pl := p.plan
	if pl == nil {
		pl = planOf(p.Protocol) // a Prepared made outside the engine
		allowed, schemas = callSets(p.Kept)
	} else {
		allowed, schemas = pl.callSets(p.Kept)
	}
	rules, err := pl.rules, pl.rulesErr
	if err != nil {
		allowed = map[string]bool{}
	}
	return vet.Policy{
		Allowed: allowed, Schemas: schemas, Rules: rules,
		Mode: p.Protocol.OnViolation, Atomic: p.Protocol.Atomic, MaxDepth: maxDepth,
		SchemaCache: p.schemas,
	}, err
}

// contextError marks a failure of a required context source.
type contextError struct{ err error }

func (e *contextError) Error() string { return "context: " + e.err.Error() }
func (e *contextError) Unwrap() error { return e.err }

// refusedError is a request refused as a whole by policy (not a malformed one): answered as the
// policy error it wraps, and recorded as a decision event of kind, about tool.
type refusedError struct {
	err        *policy.Error
	kind, tool string
	reason     string
	protocol   *policy.Effective
}

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// templateError marks a template that cannot be had (fail closed).
type templateError struct{ err error }

func (e *templateError) Error() string { return e.err.Error() }
func (e *templateError) Unwrap() error { return e.err }

// Prepare validates and rewrites a request to one of the rewritten routes (in.Path).
func (e *Engine) Prepare(ctx context.Context, in Input) (*Prepared, error) {
	in.Candidate = nil
	sf, t, in, err := e.matchInput(in, "path")
	if err != nil {
		return nil, err
	}
	return e.prepare(ctx, in, sf, t)
}

// matchInput is the surface and target of in's path (see match), with in's path and query split; a
// path that is not a rewritten route is a 400 naming the param what.
func (e *Engine) matchInput(in Input, what string) (surface.Surface, surface.Target, Input, error) {
	sf, t, u, err := e.match(in.Path)
	if err != nil {
		return nil, t, in, err
	}
	if sf == nil {
		return nil, t, in, &policy.Error{Code: policy.CodeInvalidRequest, Param: "path",
			Message: fmt.Sprintf("%s %q is not a rewritten surface: use one of %s", what, in.Path, strings.Join(e.Paths(), ", "))}
	}
	in.Path = u.Path
	if u.RawQuery != "" {
		in.Query = u.Query()
	}
	return sf, t, in, nil
}

// storedPromptRefused is the refusal of a request naming the stored prompt id where the operator
// restricts tools (why): the stored prompt's tools (web search, MCP servers, code interpreter,
// functions) and instructions are applied upstream, where promptgate can neither filter nor see
// them.
// storedPromptRestriction says why a protocol refuses a stored prompt, "" where it forwards one: it
// restricts tools, or it vets hosted MCP calls (mcp.vetHostedCalls), which a stored prompt's MCP
// tools, kept upstream where promptgate cannot make them ask for approval, would run unvetted.
func storedPromptRestriction(eff *policy.Effective, access policy.ToolAccess) string {
	if why := eff.Restriction(access); why != "" {
		return why
	}
	if eff.MCP.VetHostedCalls {
		return "the protocol vets hosted MCP calls (mcp.vetHostedCalls), which the stored prompt's MCP tools would run unasked"
	}
	return ""
}

func storedPromptRefused(id, why string, eff *policy.Effective) *refusedError {
	reason := fmt.Sprintf("stored prompt %q: its tools and instructions are applied upstream, out of promptgate's sight, and %s", id, why)
	return &refusedError{
		err: &policy.Error{Code: policy.CodeInvalidRequest, Param: "prompt", Message: "prompt: the request names " + reason +
			"; send the prompt's instructions and tools in the request instead, or use a protocol that allows every tool"},
		kind: audit.KindStoredPrompt, tool: "prompt", reason: reason, protocol: eff,
	}
}

// policyRequest is what the router reads of a request; the API key is hashed only where a route
// needs it (keyRouted).
func policyRequest(in Input, model string, ext assembly.Extension, keyRouted bool) policy.Request {
	req := policy.Request{
		Path:           in.Path,
		Model:          model,
		Header:         in.Header,
		ClientProtocol: firstNonEmpty(strings.TrimSpace(in.Header.Get(HeaderProtocol)), ext.Protocol),
		ClientWorkflow: firstNonEmpty(strings.TrimSpace(in.Header.Get(HeaderWorkflow)), ext.Workflow),
		Forced:         in.ForceProtocol,
	}
	if keyRouted {
		req.APIKeySHA256 = apiKeyHash(in.Header, in.Query)
	}
	return req
}

// apiKeyHash is the hex sha256 of the client's API key: the bearer token, else x-api-key (Anthropic
// clients), else x-goog-api-key or the key query parameter (Gemini clients).
func apiKeyHash(h http.Header, q url.Values) string {
	key := ""
	if a := h.Get("Authorization"); a != "" {
		if k, ok := strings.CutPrefix(a, "Bearer "); ok {
			key = strings.TrimSpace(k)
		}
	}
	for _, k := range []string{h.Get("X-Api-Key"), h.Get("X-Goog-Api-Key"), q.Get("key")} {
		if key == "" {
			key = strings.TrimSpace(k)
		}
	}
	if key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// workflowOf is the workflow id of an effective protocol, "" when none applies.
func workflowOf(e *policy.Effective) string {
	if e.Workflow {
		return e.ID
	}
	return ""
}
