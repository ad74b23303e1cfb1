package proxy

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/proxy/tracing"
)

// Request headers of promptgate; they are read here and never sent upstream.
const (
	HeaderProtocol     = "X-Promptgate-Protocol"
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
	HeaderBlocked       = "X-Promptgate-Blocked"
)

// GatherQuery is what a context source is told about a request.
type GatherQuery struct {
	// Protocol is the effective protocol (the workflow when one applies), BaseProtocol its base, and
	// Workflow the workflow id or "".
	Protocol, BaseProtocol, Workflow string
	Mode                             policy.ModuleMode
	ModulesOff                       []string
	User, Conversation               string
	Model                            string
	// LatestUser is the text of the latest user message; sources see it only where their config allows.
	LatestUser string
}

// Gathered is what the context sources returned for one request.
type Gathered struct {
	Sources    []ctxjson.Source
	Skipped    []ctxjson.Skip
	Directives []string
	// Notes are the sources' debug notes by source name; they reach the model only with
	// PROMPT_INCLUDE_COGNITIVE_NOTES=true, as the untrusted context key "debugNotes".
	Notes map[string][]string
}

// NotesSource is the context key of the sources' debug notes.
const NotesSource = "debugNotes"

// ContextSource gathers runtime context (plugins/ implements it). An error means a required source failed:
// the request is answered 503 context_unavailable.
type ContextSource interface {
	Gather(ctx context.Context, q GatherQuery) (Gathered, error)
}

// Engine turns a client request into the upstream request. The proxy listener, the admin preview and the
// `promptgate preview` command all run this same code.
type Engine struct {
	Defs     *Definitions
	Router   *policy.Router
	Access   policy.ToolAccess
	Settings assembly.Settings
	Limits   config.Limits
	// Context may be nil: then only the request's own promptgate.context is used.
	Context ContextSource
	Log     *slog.Logger
}

// Input is one client request.
type Input struct {
	Path   string
	Header http.Header
	Body   []byte
	// ForceProtocol selects the protocol with the operator's authority (preview --protocol).
	ForceProtocol string
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
	// StoredPrompt is the id of the stored prompt a Responses request names, "" when none: forwarded only where
	// every tool is allowed (Effective.Restriction), and recorded as a decision.
	StoredPrompt string
	// cat is the definitions snapshot the request was prepared on (nil when built elsewhere).
	cat *catalog
}

// argRules is the protocol's compiled argument rules, compiled once per snapshot.
func (p *Prepared) argRules() (*vet.RuleSet, error) { return p.cat.argRules(p.Protocol) }

// contextError marks a failure of a required context source.
type contextError struct{ err error }

func (e *contextError) Error() string { return "context: " + e.err.Error() }
func (e *contextError) Unwrap() error { return e.err }

// refusedError is a request refused as a whole by policy (not a malformed one): answered as the policy error
// it wraps, and recorded as a decision event of kind, about tool.
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

// PrepareChat validates and rewrites a /v1/chat/completions request.
func (e *Engine) PrepareChat(ctx context.Context, in Input) (*Prepared, error) {
	return e.prepare(ctx, in, chatSurface)
}

// PrepareResponses validates and rewrites an OpenAI Responses API request (/v1/responses).
func (e *Engine) PrepareResponses(ctx context.Context, in Input) (*Prepared, error) {
	return e.prepare(ctx, in, responsesSurface)
}

// PrepareMessages validates and rewrites an Anthropic Messages request (/v1/messages).
func (e *Engine) PrepareMessages(ctx context.Context, in Input) (*Prepared, error) {
	return e.prepare(ctx, in, messagesSurface)
}

// surfaceRequest is what the pipeline needs of a request, on any surface.
type surfaceRequest struct {
	model       string
	stream      bool
	application []string // the client's own system texts
	tools       []policy.Tool
	nativeTools bool
	latestUser  string
	// storedPrompt is the id of a stored prompt (Responses), "" when none.
	storedPrompt string
}

// surface adapts one rewritten API to the pipeline: how its body is read, how its tool_choice is checked,
// and how the layered prompt and the kept tools are written back. Everything else is shared. Each reads the
// body through the one assembly.Body of the request, whose members are located once.
type surface struct {
	parse      func(b *assembly.Body) (surfaceRequest, error)
	toolChoice func(b *assembly.Body, kept []policy.Tool) error
	rewrite    func(b *assembly.Body, p assembly.Prompt, kept []policy.Tool, removedAny bool) ([]byte, error)
	// contextInPrompt keeps the runtime context JSON in the layered prompt even with the structured channel
	// on (the Responses API stores input items with the conversation).
	contextInPrompt bool
}

var (
	chatSurface = surface{
		parse: func(b *assembly.Body) (surfaceRequest, error) {
			c, err := b.Chat()
			if err != nil {
				return surfaceRequest{}, err
			}
			return surfaceRequest{c.Model, c.Stream, c.Application, c.Tools, c.NativeTools, c.LatestUser, ""}, nil
		},
		toolChoice: (*assembly.Body).ChatToolChoice,
		rewrite:    (*assembly.Body).RewriteChat,
	}
	responsesSurface = surface{
		parse: func(b *assembly.Body) (surfaceRequest, error) {
			r, err := b.Responses()
			if err != nil {
				return surfaceRequest{}, err
			}
			return surfaceRequest{r.Model, r.Stream, r.Application, r.Tools, r.NativeTools, r.LatestUser, r.StoredPrompt}, nil
		},
		toolChoice:      (*assembly.Body).ResponsesToolChoice,
		rewrite:         (*assembly.Body).RewriteResponses,
		contextInPrompt: true,
	}
	messagesSurface = surface{
		parse: func(b *assembly.Body) (surfaceRequest, error) {
			m, err := b.Messages()
			if err != nil {
				return surfaceRequest{}, err
			}
			return surfaceRequest{m.Model, m.Stream, m.Application, m.Tools, m.NativeTools, m.LatestUser, ""}, nil
		},
		toolChoice: (*assembly.Body).MessagesToolChoice,
		rewrite:    (*assembly.Body).RewriteMessages,
	}
)

// prepare is the pipeline of every surface: validate, resolve the protocol, filter the tools, check
// tool_choice, gather the context, build the layered prompt, rewrite the body.
func (e *Engine) prepare(ctx context.Context, in Input, sf surface) (*Prepared, error) {
	_, sp := tracing.Stage(ctx, tracing.SpanValidate)
	if err := jsoncheck.Object(in.Body, jsoncheck.Limits{MaxDepth: e.Limits.MaxJSONDepth}); err != nil {
		return nil, stageFail(sp, err)
	}
	body := assembly.NewBody(in.Body)
	ext, err := body.Extension()
	if err != nil {
		return nil, stageFail(sp, err)
	}
	req, err := sf.parse(body)
	if err != nil {
		return nil, stageFail(sp, err)
	}
	if n, most := len(req.tools), cmp.Or(e.Limits.MaxTools, config.DefaultMaxTools); n > most {
		// Each declared tool can be a decision event: one request must not flood the audit log.
		return nil, stageFail(sp, &policy.Error{Status: http.StatusBadRequest, Code: "invalid_request", Param: "tools",
			Message: fmt.Sprintf("tools: %d declared, more than the %d this gateway takes (limits.maxTools)", n, most)})
	}
	sp.End()
	_, sp = tracing.Stage(ctx, tracing.SpanRoute)
	cat := e.Defs.snapshot()
	eff, err := e.Router.Resolve(policyRequest(in, req.model, ext), cat)
	if err != nil {
		return nil, stageFail(sp, err)
	}
	traceRoute(sp, eff)
	_, sp = tracing.Stage(ctx, tracing.SpanFilterTools)
	access := e.Access
	access.Override = cat // the kill switches of this snapshot
	kept, removed := eff.Filter(req.tools, access)
	if err := sf.toolChoice(body, kept); err != nil {
		return nil, stageFail(sp, err)
	}
	if req.storedPrompt != "" {
		if why := eff.Restriction(access); why != "" {
			return nil, stageFail(sp, storedPromptRefused(req.storedPrompt, why, eff))
		}
	}
	traceTools(sp, kept, removed)
	tmpl, err := e.Defs.template(cat, eff.Template)
	if err != nil {
		return nil, &templateError{err}
	}
	user := firstNonEmpty(in.Header.Get(HeaderUser), ext.User)
	conv := firstNonEmpty(in.Header.Get(HeaderConversation), ext.Conversation)
	layers := assembly.Layers{
		Rules:       eff.Rules,
		Directives:  eff.Directives,
		Tools:       kept,
		NativeTools: req.nativeTools,
		Meta:        ctxjson.Meta{Protocol: eff.ID},
	}
	if eff.ClientSystem != policy.ClientSystemDrop {
		layers.Application = req.application
	}
	if ext.Context != nil {
		v, err := ctxjson.Parse(ext.Context)
		if err != nil {
			return nil, fmt.Errorf("proxy: promptgate.context: %w", err)
		}
		layers.Sources = append(layers.Sources, ctxjson.Source{Name: "request", Value: v})
	}
	if e.Context != nil {
		gctx, sp := tracing.Stage(ctx, tracing.SpanContext)
		g, err := e.Context.Gather(gctx, GatherQuery{
			Protocol: eff.ID, BaseProtocol: eff.BaseID, Workflow: workflowOf(eff), Mode: eff.Modules.Mode, ModulesOff: eff.Modules.Off,
			User: user, Conversation: conv, Model: req.model, LatestUser: req.latestUser,
		})
		if err != nil {
			return nil, stageFail(sp, &contextError{err})
		}
		traceGathered(sp, g)
		layers.Sources = append(layers.Sources, g.Sources...)
		layers.Meta.Skipped = append(layers.Meta.Skipped, g.Skipped...)
		layers.Directives = append(layers.Directives, g.Directives...)
		if e.Settings.IncludeCognitiveNotes && len(g.Notes) > 0 {
			notes := ctxjson.Object()
			for _, src := range g.Sources {
				if ns := g.Notes[src.Name]; len(ns) > 0 {
					arr := ctxjson.Array()
					for _, n := range ns {
						arr.Append(ctxjson.String(n))
					}
					notes.Set(src.Name, arr)
				}
			}
			if notes.Len() > 0 {
				layers.Sources = append(layers.Sources, ctxjson.Source{Name: NotesSource, Value: notes})
			}
		}
	}
	for _, s := range layers.Sources {
		layers.Meta.Sources = append(layers.Meta.Sources, s.Name)
	}
	_, sp = tracing.Stage(ctx, tracing.SpanAssemble)
	settings := e.Settings
	if sf.contextInPrompt {
		settings.StructuredChannel = false
	}
	prompt := assembly.Build(tmpl, layers, settings)
	out, err := sf.rewrite(body, prompt, kept, len(removed) > 0)
	if err != nil {
		return nil, stageFail(sp, err)
	}
	traceAssembled(sp, tmpl, prompt, len(out))
	if prompt.ContextTruncated {
		e.Log.Debug("runtime context truncated to fit", "protocol", eff.ID, "max_chars", e.Settings.ContextMaxChars)
	}
	return &Prepared{
		Body: out, Model: req.model, Stream: req.stream, Protocol: eff, Template: tmpl,
		Prompt: prompt, Kept: kept, Removed: removed, Extension: ext, StoredPrompt: req.storedPrompt, cat: cat,
	}, nil
}

// storedPromptRefused is the refusal of a request naming the stored prompt id where the operator restricts
// tools (why): the stored prompt's tools (web search, MCP servers, code interpreter, functions) and instructions
// are applied upstream, where promptgate can neither filter nor see them.
func storedPromptRefused(id, why string, eff *policy.Effective) *refusedError {
	reason := fmt.Sprintf("stored prompt %q: its tools and instructions are applied upstream, out of promptgate's sight, and %s", id, why)
	return &refusedError{
		err: &policy.Error{Status: http.StatusBadRequest, Code: "invalid_request", Param: "prompt", Message: "prompt: the request names " + reason +
			"; send the prompt's instructions and tools in the request instead, or use a protocol that allows every tool"},
		kind: audit.KindStoredPrompt, tool: "prompt", reason: reason, protocol: eff,
	}
}

func policyRequest(in Input, model string, ext assembly.Extension) policy.Request {
	return policy.Request{
		Path:           in.Path,
		Model:          model,
		Header:         in.Header,
		APIKeySHA256:   apiKeyHash(in.Header),
		ClientProtocol: firstNonEmpty(strings.TrimSpace(in.Header.Get(HeaderProtocol)), ext.Protocol),
		ClientWorkflow: firstNonEmpty(strings.TrimSpace(in.Header.Get(HeaderWorkflow)), ext.Workflow),
		Forced:         in.ForceProtocol,
	}
}

// apiKeyHash is the hex sha256 of the bearer token, or of x-api-key (Anthropic clients).
func apiKeyHash(h http.Header) string {
	key := ""
	if a := h.Get("Authorization"); a != "" {
		if k, ok := strings.CutPrefix(a, "Bearer "); ok {
			key = strings.TrimSpace(k)
		}
	}
	if key == "" {
		key = strings.TrimSpace(h.Get("X-Api-Key"))
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

// isClientError reports errors that are the client's fault (a 4xx).
func isClientError(err error) bool {
	var pe *policy.Error
	var je *jsoncheck.Error
	return errors.As(err, &pe) || errors.As(err, &je)
}

// workflowOf is the workflow id of an effective protocol, "" when none applies.
func workflowOf(e *policy.Effective) string {
	if e.Workflow {
		return e.ID
	}
	return ""
}
