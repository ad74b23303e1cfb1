package proxy

import (
	"context"
	"errors"
	"fmt"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// stage is one step of the request side of the pipeline; the pipeline runs it in a span of its own.
type stage struct {
	span string
	// skip, when true, leaves the stage (and its span) out for this engine.
	skip bool
	run  func(e *Engine, ctx context.Context, j *job) error
	// traced sets the span's attributes once the stage succeeded; nil sets none.
	traced func(sp *tracing.Span, j *job)
}

// prepare is the pipeline of every request, on every surface: the stages in order, each in its
// span. The proxy listener, the admin preview and `promptgate preview` all run it; the response
// side is Server.respond.
func (e *Engine) prepare(ctx context.Context, in Input, sf surface.Surface, t surface.Target) (*Prepared, error) {
	j := &job{in: in, sf: sf, target: t}
	for _, st := range []stage{
		{span: tracing.SpanValidate, run: (*Engine).validate},
		{span: tracing.SpanRoute, run: (*Engine).route, traced: traceRoute},
		{span: tracing.SpanFilterTools, run: (*Engine).filterTools, traced: traceTools},
		{span: tracing.SpanContext, run: (*Engine).gatherContext, traced: traceGathered, skip: e.context == nil},
		{span: tracing.SpanFlow, run: (*Engine).analyzeFlow, traced: traceFlow},
		{span: tracing.SpanAssemble, run: (*Engine).assemble, traced: traceAssembled},
	} {
		if st.skip {
			continue
		}
		sctx, sp := tracing.Stage(ctx, st.span)
		if err := st.run(e, sctx, j); err != nil {
			return nil, stageFail(sp, err)
		}
		if st.traced != nil && sp != nil {
			st.traced(sp, j)
		}
		sp.End()
	}
	j.prepared = Prepared{
		Body: j.out, Model: j.req.Model, Stream: j.req.Stream, Protocol: j.eff, Template: j.tmpl,
		Prompt: j.prompt, Kept: j.kept, Removed: j.removed, Extension: j.ext, StoredPrompt: j.req.StoredPrompt,
		Notes: j.notes, Surface: sf, Flow: j.flow, FlowPolicy: j.flowPolicy, client: in.Body, cat: j.cat, plan: j.plan, schemas: e.schemas,
		templateRef: j.tmplRef,
		Shadow:      e.judgeShadow(ctx, j), learn: e.learning(j),
	}
	return &j.prepared, nil
}

// job is one request on its way through the stages: what each stage decided, for the next ones.
type job struct {
	// prepared is what prepare returns: in the job's allocation.
	prepared Prepared
	in       Input
	sf       surface.Surface
	// target is what the request's route said of it (the model of a Gemini path).
	target surface.Target

	// validate
	body    *assembly.Body
	members jsoncheck.Members    // where the validation found the body's members, for body
	memBuf  [16]jsoncheck.Member // their room, for most bodies
	ext     assembly.Extension
	req     surface.Request
	own     *ctxjson.Value // the request's own promptgate.context, nil when none
	// route
	cat  *catalog
	plan *plan
	eff  *policy.Effective
	// shadowPlan is the plan of the protocol's version in shadow (shadowVersion), nil when none.
	shadowPlan    *plan
	shadowVersion int
	// filterTools
	kept    []policy.Tool
	removed []policy.Removal
	// gatherContext
	gathered gather.Result
	// analyzeFlow
	flowPolicy *flow.Policy
	flow       *flow.Conversation // nil when the protocol has no information-flow rule
	transcript *flow.Transcript   // read at the first stage that needs it (see Engine.transcript)
	// assemble
	tmpl *assembly.Template
	// tmplRef is tmpl's templateRef.
	tmplRef string
	prompt  assembly.Prompt
	out     []byte
	notes   []string
}

// validate: the body is one valid JSON object (UTF-8, no duplicate keys, within the depth limit),
// its promptgate extension is read, and the surface reads the request.
func (e *Engine) validate(_ context.Context, j *job) error {
	j.members = jsoncheck.Members{Top: j.memBuf[:0:10], Inner: j.memBuf[10:10]}
	if err := jsoncheck.ObjectMembers(j.in.Body, jsoncheck.Limits{MaxDepth: e.limits.MaxJSONDepth}, assembly.PathExtension, &j.members); err != nil {
		return err
	}
	j.body = assembly.NewBodyOf(j.in.Body, &j.members)
	var err error
	if j.ext, err = j.body.Extension(); err != nil {
		return err
	}
	if j.ext.Context != nil {
		if j.own, err = ctxjson.Parse(j.ext.Context); err != nil {
			return fmt.Errorf("proxy: promptgate.context: %w", err)
		}
	}
	if j.req, err = j.sf.Parse(j.body, j.target); err != nil {
		return err
	}
	if n, most := len(j.req.Tools), e.limits.MaxTools; most > 0 && n > most {
		// Each declared tool can be a decision event: one request must not flood the audit log.
		return &policy.Error{Code: policy.CodeInvalidRequest, Param: "tools",
			Message: fmt.Sprintf("tools: %d declared, more than the %d this gateway takes (limits.maxTools)", n, most)}
	}
	return nil
}

// route: route rules, the client's choice and the default give the protocol (and workflow), on the
// definitions snapshot the request keeps to its end (a preview's candidate in it).
func (e *Engine) route(_ context.Context, j *job) error {
	j.cat = e.defs.snapshot()
	if j.in.Candidate != nil {
		c, err := withCandidate(j.cat, j.in.Candidate)
		if err != nil {
			return err
		}
		j.cat = c
	}
	base, wf, err := e.router.Select(policyRequest(j.in, j.req.Model, j.ext, e.router.KeyRouted()), j.cat)
	if err != nil {
		return err
	}
	j.plan = j.cat.plan(base, wf)
	j.eff = j.plan.eff
	j.shadowPlan, j.shadowVersion = j.cat.shadowOf(base, wf)
	return nil
}

// filterTools: the allowed set is applied to the declared tools, tool_choice is checked against
// what is kept, and a stored prompt (whose tools promptgate cannot see) is refused where any tool
// is restricted.
func (e *Engine) filterTools(_ context.Context, j *job) error {
	access := e.access
	access.Override = j.cat // the kill switches of this snapshot
	j.kept, j.removed = j.eff.Filter(j.req.Tools, access)
	if err := j.sf.CheckToolChoice(j.body, j.kept); err != nil {
		return err
	}
	if j.req.StoredPrompt != "" {
		if why := storedPromptRestriction(j.eff, access); why != "" {
			return storedPromptRefused(j.req.StoredPrompt, why, j.eff)
		}
	}
	return nil
}

// gatherContext: the context sources are asked, in parallel, each under its deadline; a required
// one that fails fails the request.
func (e *Engine) gatherContext(ctx context.Context, j *job) error {
	g, err := e.context.Gather(ctx, gather.Query{
		Protocol: j.eff.ID, BaseProtocol: j.eff.BaseID, Workflow: workflowOf(j.eff), Mode: j.eff.Modules.Mode, ModulesOff: j.eff.Modules.Off,
		User:         firstNonEmpty(j.in.Header.Get(HeaderUser), j.ext.User),
		Conversation: firstNonEmpty(j.in.Header.Get(HeaderConversation), j.ext.Conversation),
		Model:        j.req.Model, LatestUser: j.req.LatestUser,
	})
	if err != nil {
		return &contextError{err}
	}
	j.gathered = g
	return nil
}

// assemble: the template, the layered prompt (rules, application instructions, directives, the
// runtime context JSON within its budgets, the tools), the rewritten body, and the edits that
// continue the conversation upstream — all of it in the prepared body, so that a preview shows
// exactly what goes upstream.
func (e *Engine) assemble(_ context.Context, j *job) error {
	tmpl, err := j.plan.template(e.defs, j.cat)
	if err != nil {
		return &templateError{err}
	}
	j.tmpl, j.tmplRef = tmpl, j.plan.tmplRef
	j.prompt = e.build(j, tmpl, j.eff, j.kept)
	if j.prompt.ContextTruncated {
		e.log.Debug("runtime context truncated to fit", "protocol", j.eff.ID, "max_chars", e.settings.ContextMaxChars)
	}
	if j.out, err = j.sf.Rewrite(j.body, j.prompt, j.kept, len(j.removed) > 0); err != nil {
		return err
	}
	out, note, err := j.sf.Continue(j.body, j.out)
	if err != nil {
		return err
	}
	j.out = out
	if note != "" {
		j.notes = append(j.notes, note)
	}
	return nil
}

// build makes the layered prompt of a request under protocol eff with the kept tools: its rules and
// directives, the client's application texts (unless eff drops them), the runtime context the
// request gathered, the tools.
func (e *Engine) build(j *job, tmpl *assembly.Template, eff *policy.Effective, kept []policy.Tool) assembly.Prompt {
	layers := assembly.Layers{
		Rules:       eff.Rules,
		Directives:  eff.Directives,
		Tools:       kept,
		NativeTools: j.req.NativeTools,
		Meta:        ctxjson.Meta{Protocol: eff.ID},
	}
	if eff.ClientSystem != policy.ClientSystemDrop {
		layers.Application = j.req.Application
	}
	if j.own != nil {
		layers.Sources = append(layers.Sources, ctxjson.Source{Name: "request", Value: j.own})
	}
	g := j.gathered
	layers.Sources = append(layers.Sources, g.Sources...)
	layers.Meta.Skipped = append(layers.Meta.Skipped, g.Skipped...)
	layers.Directives = append(layers.Directives, g.Directives...)
	if notes := e.notes(g); notes != nil {
		layers.Sources = append(layers.Sources, ctxjson.Source{Name: gather.NotesSource, Value: notes})
	}
	for _, s := range layers.Sources {
		layers.Meta.Sources = append(layers.Meta.Sources, s.Name)
	}
	settings := e.settings
	if j.sf.ContextInPrompt() {
		settings.StructuredChannel = false
	}
	p := j.cat.frame(tmpl, layers, settings).Build(layers, settings)
	p.VetHostedMCP = eff.MCP.VetHostedCalls
	return p
}

// notes are the sources' debug notes as the untrusted context value gather.NotesSource, where
// PROMPT_INCLUDE_COGNITIVE_NOTES is on and a source sent some; else nil.
func (e *Engine) notes(g gather.Result) *ctxjson.Value {
	if !e.settings.IncludeCognitiveNotes || len(g.Notes) == 0 {
		return nil
	}
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
	if notes.Len() == 0 {
		return nil
	}
	return notes
}

// continued is the upstream body of a continued answer's next round (onViolation "continue"): sent,
// the body of the round before, with the model's turn t and promptgate's answers to its calls
// appended (the surface's AppendTurn). The first round's body is prepare's, which a preview shows;
// the next rounds exist only once an answer's calls were refused.
func (p *Prepared) continued(sent []byte, t relay.Turn) ([]byte, error) {
	if len(t.Calls) == 0 {
		return nil, errors.New("continue: no call to answer")
	}
	out, err := p.Surface.AppendTurn(sent, t)
	if err != nil {
		return nil, fmt.Errorf("continue: %w", err)
	}
	return out, nil
}

// continueRounds is how many times an answer may be continued: the protocol's continueRounds, or
// flow.DefaultContinueRounds.
func (p *Prepared) continueRounds() int {
	if p.FlowPolicy == nil {
		return flow.DefaultContinueRounds
	}
	return p.FlowPolicy.ContinueRounds()
}
