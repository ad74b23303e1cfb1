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

// exchange is the state of one rewritten request, carried in its context to the reverse proxy hooks.
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
	// ctx is the client's request's context: a next round of a continued answer goes upstream under it (the
	// first round's request context ends with that round's body).
	ctx context.Context
	// round is the continuation round of the answer being vetted (onViolation "continue"): 0 for the
	// upstream's first answer.
	round atomic.Int32
	// conversation is the conversation id the request named, "" when none (the MCP door's join).
	conversation string
	// shadow judges each call again under the protocol's version in shadow; nil when none is in shadow.
	shadow *shadowCheck
	// learned counts, per tool, the calls of the answer learn mode has seen (their number in the
	// conversation); nil when the request is not learned from.
	learnedMu sync.Mutex
	learned   map[string]int
}

// begin starts the response side of a prepared request: its tool-call policy, the surface's exchange and the
// route's histograms (rm); created, when not nil, binds what the answer has the upstream store.
func (s *Server) begin(id string, log *slog.Logger, client []byte, prep *Prepared, rm *metrics.Route, created func(string)) *exchange {
	pol, err := prep.Policy(s.limits.MaxJSONDepth)
	if err != nil {
		// Validated when the protocol was stored; if it still fails, no call may pass.
		log.Error("argument rules do not compile; every tool call is refused", "protocol", prep.Protocol.ID, "err", err)
	}
	if prep.Flow != nil {
		pol.Judge = newFlowJudge(prep.Flow, len(client))
	}
	x := &exchange{id: id, prep: prep, log: log, policy: pol, metrics: rm}
	if sh := prep.Shadow; sh != nil && sh.Err == "" {
		x.shadow = &shadowCheck{sh: sh, judge: vet.NewShadow(sh.policy(s.limits.MaxJSONDepth, prep.schemas, len(client)))}
	}
	x.ex = prep.Surface.Begin(surface.Start{Client: client, Upstream: prep.Body, Policy: pol,
		Protocol: prep.Protocol.ID, ProtocolVersion: prep.Protocol.Version, Record: prep.Flow != nil, Created: created,
		VetHostedMCP: prep.Protocol.MCP.VetHostedCalls})
	return x
}

// vetResponse is the response side of the pipeline (the reverse proxy's ModifyResponse), top to bottom:
// promptgate's own and CORS headers from upstream are dropped; an error answer passes when it is JSON; an
// answer in a content coding is refused; a stream is relayed with every call held until it is vetted (span
// relay), a body is read whole and vetted (span vet); a call blocked in error mode makes the answer a 403. No
// byte of a call reaches the client before its decision.
//
// The information-flow check joins after vet, for every call of a stream or a body, through the Vetting the
// surface is given (the policy's Judge). In onViolation "continue", the Vetting's Next asks the upstream again
// within this exchange (see next), before the client's answer ends.
func (s *Server) vetResponse(resp *http.Response) error {
	s.maskKeys(resp)
	upstreamHeaders(resp.Header)
	guardTrailers(resp, s.buffers)
	x := inflightOf(resp.Request.Context()).x
	if x == nil {
		return errors.New("proxy: response without its exchange")
	}
	ctx := resp.Request.Context()
	x.metrics.Upstream(time.Since(x.sent))
	x.trace.upstreamDone(resp.StatusCode)
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode >= 400 {
		return surface.CheckErrorBody(resp, ct)
	}
	if err := surface.PlainBody(resp); err != nil {
		return err
	}
	stream := ct == "text/event-stream"
	v := surface.Vetting{Checker: vet.NewChecker(x.policy), Record: x.trace.count(s.recorder(ctx, x)),
		Next: s.next(resp.Request, x, stream)}
	if stream {
		surface.StreamBody(resp, x.trace.relay(ctx, s.relayed(ctx, x.log, x.ex.Stream(resp.Body, v))))
		return nil
	}
	body, err := surface.ReadBody(resp)
	if err != nil {
		return err
	}
	_, vsp := tracing.Stage(ctx, tracing.SpanVet)
	out, res, err := x.ex.Body(body, v)
	x.trace.vetDone(vsp, err)
	if err != nil {
		return fmt.Errorf("%w: %v", surface.ErrUpstreamMalformed, err)
	}
	status := resp.StatusCode
	if res.ErrorCall != nil {
		out, status = x.prep.Surface.BlockedError(*res.ErrorCall), http.StatusForbidden
	}
	if res.Blocked > 0 {
		resp.Header.Set(HeaderBlocked, strconv.Itoa(res.Blocked))
	}
	if res.Rounds > 0 {
		resp.Header.Set(HeaderContinued, strconv.Itoa(res.Rounds))
	}
	surface.SetBody(resp, status, out)
	return nil
}

// recorder records the decisions on the calls of an exchange's answer, after the surface has seen them: the
// call's decision, then the further ones on it (the other information-flow rules it broke, a confirmation's),
// each with the continuation round it was taken in.
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
