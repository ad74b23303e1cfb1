package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// exchange is the state of one rewritten request, carried in its context to the reverse proxy
// hooks.
type exchange struct {
	id   string
	prep *Prepared
	log  *slog.Logger
	sent time.Time // when the request went upstream
	// ex is the surface's side of the exchange.
	ex surface.Exchange
	// policy vets the calls of the answer.
	policy vet.Policy
	trace  exchangeTrace
	// metrics are the route's histograms (nil without metrics).
	metrics *metrics.Route
	// ctx is the client's request's context: a next round of a continued answer goes upstream under
	// it (the first round's request context ends with that round's body).
	ctx context.Context
	// round is the continuation round of the answer being vetted (onViolation "continue"): 0 for
	// the upstream's first answer.
	round atomic.Int32
	// conversation is the conversation id the request named, "" when none (the MCP door's join).
	conversation string
	// shadow judges each call again under the protocol's version in shadow; nil when none is in
	// shadow.
	shadow *shadowCheck
	// learned counts, per tool, the calls of the answer learn mode has seen (their number in the
	// conversation); nil when the request is not learned from.
	learnedMu sync.Mutex
	learned   map[string]int
	// answer is the upstream's answer on its way through the response stages (one per exchange).
	answer answer
}

// begin starts the response side of a prepared request: its tool-call policy (the call stages that
// judge a call, see callStages), the surface's exchange and the route's histograms (rm); created,
// when not nil, binds what the answer has the upstream store.
func (s *Server) begin(id string, log *slog.Logger, client []byte, prep *Prepared, rm *metrics.Route, created func(string)) *exchange {
	x := &exchange{id: id, prep: prep, log: log, metrics: rm}
	for _, cs := range callStages() {
		if cs.policy != nil {
			cs.policy(s, x, &x.policy)
		}
	}
	if sh := prep.Shadow; sh != nil && sh.Err == "" {
		x.shadow = &shadowCheck{sh: sh, judge: vet.NewShadow(sh.policy(s.limits.MaxJSONDepth, prep.schemas, len(client)))}
	}
	x.ex = prep.Surface.Begin(surface.Start{Client: client, Upstream: prep.Body, Policy: x.policy,
		Protocol: prep.Protocol.ID, ProtocolVersion: prep.Protocol.Version, Record: prep.Flow != nil, Created: created,
		VetHostedMCP: prep.Protocol.MCP.VetHostedCalls})
	return x
}

// responseStage is one step of the response side of the pipeline; the pipeline runs it in a span of
// its own where it names one.
type responseStage struct {
	span string // "" for none
	// when, when not nil, runs the stage only on the answers it holds for.
	when func(a *answer) bool
	run  func(s *Server, ctx context.Context, a *answer) error
	// traced sets the span's attributes once the stage ran, failed or not; nil sets none.
	traced func(sp *tracing.Span, a *answer)
	// ends: the answer is complete once the stage ran; the stages after it are left out.
	ends bool
	// outlives: the stage hands its span to the body it makes, which ends it with the stream.
	outlives bool
}

// respond is the response side of the pipeline of every rewritten request (the reverse proxy's
// ModifyResponse): the stages in order, each in its span where it has one. No byte of a call
// reaches the client before its decision: a stream's calls are held until they are vetted, a body
// is vetted whole. Each call goes through the call stages (callStages), which the vetting stage
// gives the surface.
func (s *Server) respond(resp *http.Response) error {
	x := inflightOf(resp.Request.Context()).x
	if x == nil {
		return errors.New("proxy: response without its exchange")
	}
	ctx := resp.Request.Context()
	a := &x.answer
	*a = answer{resp: resp, x: x}
	for _, st := range [...]responseStage{
		{run: (*Server).guardAnswer},
		{run: (*Server).upstreamAnswered},
		{run: (*Server).passError, when: (*answer).failed, ends: true},
		{run: (*Server).plainAnswer},
		{run: (*Server).vetting},
		{span: tracing.SpanRelay, run: (*Server).relay, when: (*answer).streamed, ends: true, outlives: true},
		{run: (*Server).readAnswer},
		{span: tracing.SpanVet, run: (*Server).vetBody, traced: traceVet},
		{run: (*Server).writeAnswer},
	} {
		if st.when != nil && !st.when(a) {
			continue
		}
		sctx, sp := stageSpan(ctx, st.span)
		a.span = sp
		err := st.run(s, sctx, a)
		if st.traced != nil && sp != nil {
			st.traced(sp, a)
		}
		if err != nil {
			return stageFail(sp, err)
		}
		if !st.outlives {
			sp.End()
		}
		if st.ends {
			break
		}
	}
	return nil
}

// answer is the upstream's answer to a rewritten request on its way through the response stages:
// what each stage found, for the next ones.
type answer struct {
	resp *http.Response
	x    *exchange
	// span is the span of the stage running (nil for none).
	span *tracing.Span
	// guardAnswer: the media type, and whether the answer is an SSE stream.
	media  string
	stream bool
	// vetting
	v surface.Vetting
	// readAnswer
	body []byte
	// vetBody: the body the client gets, and what the surface did.
	out []byte
	res relay.Result
}

// failed holds for an error answer.
func (a *answer) failed() bool { return a.resp.StatusCode >= 400 }

// streamed holds for an SSE stream.
func (a *answer) streamed() bool { return a.stream }

// guardAnswer: the operator keys the upstream echoes are masked, its request id is kept under
// another name, promptgate's own and the CORS headers are dropped (from the trailers too), and the
// media type is read.
func (s *Server) guardAnswer(_ context.Context, a *answer) error {
	s.guardHeaders(a.resp)
	a.media, _, _ = mime.ParseMediaType(a.resp.Header.Get("Content-Type"))
	a.stream = a.media == "text/event-stream"
	return nil
}

// upstreamAnswered: the upstream's latency goes to the route's histogram, and its span ends with
// the status.
func (s *Server) upstreamAnswered(_ context.Context, a *answer) error {
	a.x.metrics.Upstream(time.Since(a.x.sent))
	a.x.trace.upstreamDone(a.resp.StatusCode)
	return nil
}

// passError: an error answer passes as the upstream sent it when its body is JSON, and is malformed
// otherwise.
func (s *Server) passError(_ context.Context, a *answer) error {
	return surface.CheckErrorBody(a.resp, a.media)
}

// plainAnswer: an answer in a content coding is refused: its bytes could not be vetted.
func (s *Server) plainAnswer(_ context.Context, a *answer) error { return surface.PlainBody(a.resp) }

// vetting: the stages every call of the answer goes through (callStages), for the surface to run.
func (s *Server) vetting(ctx context.Context, a *answer) error {
	for _, cs := range callStages() {
		if cs.vetting != nil {
			cs.vetting(s, ctx, a)
		}
	}
	return nil
}

// relay: a stream is relayed as it comes, each call held until its decision; the stage's span lasts
// until the stream ends, whose end is logged (a client gone counts as 499).
func (s *Server) relay(ctx context.Context, a *answer) error {
	x := a.x
	surface.StreamBody(a.resp, x.trace.relay(a.span, s.relayed(ctx, x.log, x.ex.Stream(a.resp.Body, a.v))))
	return nil
}

// readAnswer: a body is read whole (at most surface.MaxBody).
func (s *Server) readAnswer(_ context.Context, a *answer) (err error) {
	a.body, err = surface.ReadBody(a.resp)
	return err
}

// vetBody: the surface vets the body's calls and writes the body the client gets.
func (s *Server) vetBody(_ context.Context, a *answer) error {
	out, res, err := a.x.ex.Body(a.body, a.v)
	if err != nil {
		return fmt.Errorf("%w: %v", surface.ErrUpstreamMalformed, err)
	}
	a.out, a.res = out, res
	return nil
}

// traceVet: the decisions on the body's calls.
func traceVet(sp *tracing.Span, a *answer) { a.x.trace.decisions(sp) }

// writeAnswer: a call blocked in error mode makes the answer a 403; the calls the client did not
// get and the rounds the answer was continued are counted in the headers; the client's body takes
// the upstream's place.
func (s *Server) writeAnswer(_ context.Context, a *answer) error {
	out, status := a.out, a.resp.StatusCode
	if a.res.ErrorCall != nil {
		out, status = a.x.prep.Surface.BlockedError(*a.res.ErrorCall), http.StatusForbidden
	}
	if a.res.Blocked > 0 {
		a.resp.Header.Set(HeaderBlocked, strconv.Itoa(a.res.Blocked))
	}
	if a.res.Rounds > 0 {
		a.resp.Header.Set(HeaderContinued, strconv.Itoa(a.res.Rounds))
	}
	surface.SetBody(a.resp, status, out)
	return nil
}

// callStage is one stage of every call of an answer, body or stream. The surface runs the stages
// through what they build: the exchange's tool-call policy when the request is prepared (begin),
// and the answer's surface.Vetting when it comes (respond's vetting stage).
type callStage struct {
	// policy builds the stage into the tool-call policy; nil when the stage is not in it.
	policy func(s *Server, x *exchange, p *vet.Policy)
	// vetting builds the stage into the answer's Vetting; nil when the stage is not in it.
	vetting func(s *Server, ctx context.Context, a *answer)
}

// callStages are the stages every call of an answer goes through, in this order: vet (the kept
// tools, their schemas and the argument rules: vet.Checker), flow (the information-flow rules judge
// a call vet passed: the policy's Judge), record (the decision goes to the surface, the observer,
// the decision log and the rest: recorder) and continue (in onViolation "continue", a turn whose
// every call was refused is answered by promptgate and the upstream is asked again: next). The
// relay, and a surface's Body, run them on each call in this order.
func callStages() [4]callStage {
	return [...]callStage{
		{policy: (*Server).vetPolicy, vetting: checker},
		{policy: flowPolicy},
		{vetting: (*Server).recordCalls},
		{vetting: (*Server).continueTurns},
	}
}

// vetPolicy: the protocol's tool-call policy. Argument rules that do not compile (they were
// validated when the protocol was stored) let no call pass.
func (s *Server) vetPolicy(x *exchange, p *vet.Policy) {
	pol, err := x.prep.Policy(s.limits.MaxJSONDepth)
	if err != nil {
		x.log.Error("argument rules do not compile; every tool call is refused", "protocol", x.prep.Protocol.ID, "err", err)
	}
	*p = pol
}

// checker: the answer's calls are vetted by a checker of the exchange's policy.
func checker(_ *Server, _ context.Context, a *answer) { a.v.Checker = vet.NewChecker(a.x.policy) }

// flowPolicy: where the protocol has information-flow rules, the request's conversation judges each
// call.
func flowPolicy(_ *Server, x *exchange, p *vet.Policy) {
	if x.prep.Flow != nil {
		p.Judge = newFlowJudge(x.prep.Flow, len(x.prep.client))
	}
}

// recordCalls: every decision is recorded (recorder) and counted for the vet and relay spans.
func (s *Server) recordCalls(ctx context.Context, a *answer) {
	a.v.Record = a.x.trace.count(s.recorder(ctx, a.x))
}

// continueTurns: in onViolation "continue", a turn whose calls were all refused goes upstream again
// (next).
func (s *Server) continueTurns(_ context.Context, a *answer) {
	a.v.Next = s.next(a.resp.Request, a.x, a.stream)
}

// recorder records the decisions on the calls of an exchange's answer, after the surface has seen
// them: the call's decision, then the further ones on it (the other information-flow rules it
// broke, a confirmation's), each with the continuation round it was taken in.
func (s *Server) recorder(ctx context.Context, x *exchange) func(vet.Decision) {
	evs := eventsOf(x.id, x.prep.Protocol)
	return func(d vet.Decision) {
		x.ex.Decided(d)
		if s.opt.Observer != nil {
			s.opt.Observer.Decided(ctx, d)
		}
		round := int(x.round.Load())
		s.opt.Audit.Record(ctx, evs.toolCall(d, s.opt.AuditArguments, round))
		for _, m := range d.More {
			s.opt.Audit.Record(ctx, evs.toolCall(m, false, round))
		}
		s.sawBlocked(d)
		s.released(x, d)
		if x.shadow != nil {
			s.opt.Metrics.ShadowCall()
			if sd, differs := x.shadow.decide(d); differs {
				s.opt.Audit.Record(ctx, evs.shadowCall(x.shadow.sh.Version, d, sd, round))
			}
		}
		s.learn(x, d)
	}
}

// sawBlocked tells the tool watcher of a call that was blocked (once per call, whatever its More).
func (s *Server) sawBlocked(d vet.Decision) {
	if s.opt.Tools != nil && d.Verdict == vet.VerdictBlocked {
		s.opt.Tools.Blocked(d.Tool)
	}
}

// host is what the server gives a surface on the passthrough path.
type host struct{ s *Server }

var _ surface.Host = host{}

func (h host) Recorder(ctx context.Context, protocol string, protocolVersion int) relay.Recorder {
	evs := events{requestID: inflightOf(ctx).id, protocol: protocol, protocolVersion: protocolVersion}
	return func(d vet.Decision) {
		h.s.opt.Audit.Record(ctx, evs.toolCall(d, h.s.opt.AuditArguments, 0))
		for _, m := range d.More {
			h.s.opt.Audit.Record(ctx, evs.toolCall(m, false, 0))
		}
		h.s.sawBlocked(d)
	}
}

func (h host) Relayed(ctx context.Context, body io.ReadCloser) io.ReadCloser {
	return h.s.relayed(ctx, h.Log(ctx), body)
}

func (h host) Log(ctx context.Context) *slog.Logger {
	return requestLogger(h.s.log, inflightOf(ctx).id)
}
