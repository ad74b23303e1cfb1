package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// Shadow versions: a stored protocol version put in shadow judges every request routed to its
// protocol beside the active version — the tools it would keep, the size of the prompt it would
// build, and every call of the answer — for the record only. Nothing it decides reaches the
// upstream or the client: the request is prepared, sent and answered by the active version alone,
// and the shadow's work happens beside it (a shadow's failure is logged, never the request's).
// Where the two versions decide differently, a decision event of kind shadow says so.

// Shadow is what the version in shadow of a request's protocol makes of the request.
type Shadow struct {
	// Protocol is the effective protocol under the version in shadow; Version is that version (of
	// the workflow when the workflow's is in shadow, else of the protocol).
	Protocol *policy.Effective
	Version  int
	// Kept and Removed are the tools it would keep and remove.
	Kept    []policy.Tool
	Removed []policy.Removal
	// Sizes are the sizes of the prompt it would build (with the context the request gathered).
	Sizes assembly.Sizes
	// Refused is the refusal it would answer the request with (tool_choice naming a tool it
	// removes, a stored prompt it restricts); nil when it takes the request.
	Refused *policy.Error
	// FlowPolicy and Flow are its information-flow rules and the conversation as they read it (Flow
	// nil without rules).
	FlowPolicy *flow.Policy
	Flow       *flow.Conversation
	// Err says why the shadow could not judge the request (its template missing, its rules not
	// compiling); "" when it did.
	Err  string
	plan *plan
}

// shadowOf is the version in shadow that applies to a request routed to base (and workflow wf): the
// plan of base and wf with each in shadow replaced by its shadow, and the version in shadow; nil
// when neither has one.
func (c *catalog) shadowOf(base, wf *policy.Protocol) (*plan, int) {
	if c == nil || len(c.shadows) == 0 {
		return nil, 0
	}
	sb, inBase := c.shadows[base.ID]
	var sw *policy.Protocol
	inWF := false
	if wf != nil {
		sw, inWF = c.shadows[wf.ID]
	}
	switch {
	case !inBase && !inWF:
		return nil, 0
	case !inBase:
		sb = base
	case !inWF:
		sw = wf
	}
	v := sb.Version
	if inWF {
		v = sw.Version
	}
	return c.plan(sb, sw), v
}

// judgeShadow judges the request side under the version in shadow, in a span of its own. It never
// fails the request.
func (e *Engine) judgeShadow(ctx context.Context, j *job) *Shadow {
	if j.shadowPlan == nil {
		return nil
	}
	_, sp := tracing.Stage(ctx, tracing.SpanShadow)
	defer sp.End()
	pl := j.shadowPlan
	sh := &Shadow{Protocol: pl.eff, Version: j.shadowVersion, plan: pl}
	access := e.access
	access.Override = j.cat
	sh.Kept, sh.Removed = pl.eff.Filter(j.req.Tools, access)
	sh.Refused = refusal(j.sf.CheckToolChoice(j.body, sh.Kept))
	if sh.Refused == nil && j.req.StoredPrompt != "" {
		if why := storedPromptRestriction(pl.eff, access); why != "" {
			sh.Refused = storedPromptRefused(j.req.StoredPrompt, why, pl.eff).err
		}
	}
	if err := e.shadowPrompt(j, sh); err != nil {
		sh.Err = err.Error()
		e.log.Warn("the version in shadow could not judge the request", "protocol", pl.eff.ID, "version", sh.Version, "err", err)
		return sh
	}
	if err := e.shadowFlow(j, sh); err != nil {
		sh.Err = err.Error()
		e.log.Warn("the version in shadow could not judge the request", "protocol", pl.eff.ID, "version", sh.Version, "err", err)
	}
	return sh
}

// refusal is err as the policy error the client would get; nil for none (or an error of another
// kind).
func refusal(err error) *policy.Error {
	var pe *policy.Error
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// shadowPrompt sizes the prompt the shadow would build: the active prompt's sizes where every part
// of the prompt that a version decides is the same, else the prompt built again.
func (e *Engine) shadowPrompt(j *job, sh *Shadow) error {
	a, s := j.eff, sh.Protocol
	if a.Template == s.Template && a.Rules == s.Rules && a.ClientSystem == s.ClientSystem && a.ID == s.ID &&
		slices.Equal(a.Directives, s.Directives) && sameTools(j.kept, sh.Kept) {
		sh.Sizes = j.prompt.Sizes
		return nil
	}
	tmpl, err := sh.plan.template(e.defs, j.cat)
	if err != nil {
		return err
	}
	sh.Sizes = e.build(j, tmpl, s, sh.Kept).Sizes
	return nil
}

func sameTools(a, b []policy.Tool) bool {
	return slices.EqualFunc(a, b, func(x, y policy.Tool) bool { return x.Name == y.Name })
}

// shadowFlow reads the conversation under the shadow's information-flow rules, for the record only.
func (e *Engine) shadowFlow(j *job, sh *Shadow) error {
	pol, err := sh.plan.flow, sh.plan.flowErr
	if err != nil {
		return fmt.Errorf("the information-flow rules do not compile: %w", err)
	}
	sh.FlowPolicy = pol
	if pol.Empty() {
		return nil
	}
	t, err := e.transcript(j)
	if err != nil {
		return err
	}
	opt := e.flowOptions(j)
	opt.Shadow = true
	sh.Flow, err = pol.Analyze(t, opt)
	return err
}

// policy is the shadow's tool-call policy for the response side: its kept tools, the client's
// schemas, its argument rules and mode, and its information-flow rules as a judge that spends and
// remembers nothing.
func (sh *Shadow) policy(maxDepth int, schemas *vet.SchemaCache, bodyBytes int) vet.Policy {
	allowed := make(map[string]bool, len(sh.Kept))
	declared := make(map[string][]byte, len(sh.Kept))
	for _, t := range sh.Kept {
		if t.UpstreamOnly {
			continue
		}
		allowed[t.Name] = true
		if len(t.Schema) > 0 {
			declared[t.Name] = t.Schema
		}
	}
	if sh.plan.rulesErr != nil {
		allowed = map[string]bool{}
	}
	p := vet.Policy{Allowed: allowed, Schemas: declared, Rules: sh.plan.rules, Mode: sh.Protocol.OnViolation,
		MaxDepth: maxDepth, SchemaCache: schemas}
	if sh.Flow != nil {
		p.Judge = newFlowJudge(sh.Flow, bodyBytes)
	}
	return p
}

// shadowCheck is the response side of a shadow: each call the active version decided, judged again.
type shadowCheck struct {
	sh    *Shadow
	judge *vet.Shadow
}

// decide returns the shadow's decision on a call the active version decided, and whether they
// differ.
func (c *shadowCheck) decide(active vet.Decision) (vet.Decision, bool) {
	d := c.judge.Judge(active)
	return d, d.Verdict != active.Verdict
}

// shadowTools are the events of the tools the two versions keep differently, and of the request the
// shadow would refuse.
func (e events) shadowTools(prep *Prepared) []audit.Event {
	sh := prep.Shadow
	var out []audit.Event
	keptBy := func(kept []policy.Tool, name string) bool {
		return slices.ContainsFunc(kept, func(t policy.Tool) bool { return t.Name == name })
	}
	for _, rm := range sh.Removed {
		if keptBy(prep.Kept, rm.Name) {
			out = append(out, e.shadow(sh.Version, vet.DisplayName(rm.Name), audit.VerdictAllowed, audit.VerdictRemoved, "",
				"the version in shadow removes the tool: "+rm.Reason))
		}
	}
	for _, rm := range prep.Removed {
		if keptBy(sh.Kept, rm.Name) {
			out = append(out, e.shadow(sh.Version, vet.DisplayName(rm.Name), audit.VerdictRemoved, audit.VerdictAllowed, "",
				"the version in shadow keeps the tool the active version removes: "+rm.Reason))
		}
	}
	if sh.Refused != nil {
		out = append(out, e.shadow(sh.Version, "", audit.VerdictAllowed, audit.VerdictBlocked, "",
			"the version in shadow refuses the request ("+sh.Refused.Code+"): "+sh.Refused.Message))
	}
	return out
}

// shadowCall is the event of a call the two versions decide differently: the shadow's verdict, the
// rule that made the difference (the shadow's, else the active version's) and why.
func (e events) shadowCall(version int, active, shadow vet.Decision, round int) audit.Event {
	rule, reason := shadow.Rule, shadow.Reason
	if !shadow.Blocked() && shadow.Verdict != vet.VerdictAudited {
		rule = active.Rule
		reason = "the version in shadow releases the call; the active version: " + active.Reason
	}
	if reason == "" {
		reason = "the version in shadow decides " + shadow.Verdict
	}
	ev := e.shadow(version, vet.DisplayName(active.Tool), string(active.Verdict), string(shadow.Verdict), rule, reason)
	ev.Round = round
	return ev.WithArguments(active.Args, false)
}

func (e events) shadow(version int, tool, activeVerdict, shadowVerdict, rule, reason string) audit.Event {
	ev := e.event(audit.KindShadow, tool, shadowVerdict, reason)
	ev.Rule, ev.ActiveVerdict, ev.ShadowVersion = rule, activeVerdict, version
	return ev
}
