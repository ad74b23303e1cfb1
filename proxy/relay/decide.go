package relay

import "github.com/promptgate/promptgate/policy/vet"

// Error codes the surface packages write, in a stream's error event or (via the caller) a 403 body.
const (
	// CodeToolCallBlocked: a call was blocked in error mode.
	CodeToolCallBlocked = "tool_call_blocked"
	// CodeTruncated: the upstream stream ended (or failed) before its terminal event.
	CodeTruncated = "upstream_stream_truncated"
)

// Recorder is called once for every vetted call: allowed, blocked and audited. It may be nil.
type Recorder func(vet.Decision)

// Result says what a surface's Body did.
type Result struct {
	// Blocked is the number of calls removed (refuse mode) or that made the response an error.
	Blocked int
	// ErrorCall is set in error mode when a call was blocked: the caller answers 403
	// tool_call_blocked instead of sending the body.
	ErrorCall *vet.Decision
	// Continue is set in continue mode when every call of the answer (one turn) was blocked and
	// promptgate can answer each itself; the body is written as refuse writes it, for when the
	// answer is not continued.
	Continue *Continuation
	// Rounds is how many times the answer was continued (surface.Rounds); Blocked counts every
	// round's.
	Rounds int
}

// Vet vets the calls of a non-stream body together, hands every decision to rec (which may be nil)
// and counts the blocked calls. In error mode, when a call is blocked and ErrorCall is not set yet,
// ErrorCall becomes the call that broke the policy (see Culprit), not one blocked with its batch.
// It returns the decisions, one per call in order.
func (r *Result) Vet(c *vet.Checker, rec Recorder, calls []*vet.Call) []vet.Decision {
	ds := c.VetBatch(calls)
	for _, d := range ds {
		if rec != nil {
			rec(d)
		}
		if d.Blocked() {
			r.Blocked++
		}
	}
	if i := Culprit(c, ds); i >= 0 && r.ErrorCall == nil {
		d := ds[i]
		r.ErrorCall = &d
	}
	return ds
}

// Blocked is the number of calls blocked so far in the stream (the blocked decisions passed to
// Record).
func (r *Relay) Blocked() int { return r.blocked }

// Record hands a decision of the stream to its Recorder and counts it when it blocks a call.
func (r *Relay) Record(d vet.Decision) {
	if r.rec != nil {
		r.rec(d)
	}
	if d.Blocked() {
		r.blocked++
	}
}

// AfterRelease records the decision on an event of a call that the client already has (an event
// that comes after the call was released): the client cannot take back what it has, so the event is
// blocked with vet.ReasonAfterRelease, or audited in audit mode. The surface drops the event unless
// it is audited (it passes then), and in error mode ends the stream.
func (r *Relay) AfterRelease(c *vet.Checker, call *vet.Call) vet.Decision {
	d := vet.Decision{Kind: vet.KindToolCall, Choice: call.Choice, CallID: call.ID, Tool: call.Name,
		Verdict: vet.VerdictBlocked, Reason: vet.ReasonAfterRelease}
	if c.Mode() == vet.ModeAudit {
		d.Verdict = vet.VerdictAudited
	}
	r.Record(d)
	return d
}

// Settle vets calls of a stream together (see Verdicts) and settles each: in error mode, when one
// is blocked, every decision is recorded and end writes what ends the stream for the culprit's
// decision; otherwise, call by call in order, the decision is recorded, each writes the call out
// (allowed) or what takes its place (blocked), and the call lets go of its held events and its
// arguments.
func Settle[M any, P Call[M]](r *Relay, c *vet.Checker, ps []P, end func(culprit vet.Decision), each func(p P, d vet.Decision)) {
	ds, culprit := Verdicts[M](c, ps)
	if culprit >= 0 {
		for _, d := range ds {
			r.Record(d)
		}
		end(ds[culprit])
		return
	}
	for i, d := range ds {
		r.Record(d)
		each(ps[i], d)
		p := ps[i].pending()
		p.Drop()
		p.Call.Args = nil
	}
}
