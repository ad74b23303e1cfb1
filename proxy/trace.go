package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/propagation"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// The span attributes of promptgate. Only names, versions, counts and codes: never prompt text,
// tool arguments, context values or keys.
const (
	attrRequestID       = "promptgate.request_id"
	attrRoute           = "promptgate.route"
	attrProtocol        = "promptgate.protocol"
	attrProtocolVersion = "promptgate.protocol_version"
	attrBaseProtocol    = "promptgate.base_protocol"
	attrTemplate        = "promptgate.template"
	attrToolsKept       = "promptgate.tools.kept"
	attrToolsRemoved    = "promptgate.tools.removed"
	attrSources         = "promptgate.context.sources"
	attrSkipped         = "promptgate.context.skipped"
	attrTruncated       = "promptgate.context.truncated"
	attrBodyBytes       = "promptgate.upstream_request.bytes"
	attrCallsAllowed    = "promptgate.tool_calls.allowed"
	attrCallsBlocked    = "promptgate.tool_calls.blocked"
	attrCallsAudited    = "promptgate.tool_calls.audited"
	attrFlowSegments    = "promptgate.flow.segments"
	attrFlowCalls       = "promptgate.flow.calls"
	attrFlowUnseen      = "promptgate.flow.unseen_history"
	attrRound           = "promptgate.continue.round"
)

// stageSpan starts the span of a response stage that names one (see tracing.Stage); ctx and nil for
// one that names none.
func stageSpan(ctx context.Context, name string) (context.Context, *tracing.Span) {
	if name == "" {
		return ctx, nil
	}
	return tracing.Stage(ctx, name)
}

// stageFail ends a stage's span as failed with the error's API code, and returns err.
func stageFail(sp *tracing.Span, err error) error {
	if sp != nil {
		sp.Fail(err, toAPIError(err).Code)
	}
	return err
}

// traceRoute: the protocol chosen.
func traceRoute(sp *tracing.Span, j *job) {
	sp.String(attrProtocol, j.eff.ID)
	sp.Int(attrProtocolVersion, j.eff.Version)
	sp.String(attrBaseProtocol, j.eff.BaseID)
}

// traceTools: the counts of kept and removed tools.
func traceTools(sp *tracing.Span, j *job) {
	sp.Int(attrToolsKept, len(j.kept))
	sp.Int(attrToolsRemoved, len(j.removed))
}

// traceGathered: the counts of sources answered and skipped.
func traceGathered(sp *tracing.Span, j *job) {
	sp.Int(attrSources, len(j.gathered.Sources))
	sp.Int(attrSkipped, len(j.gathered.Skipped))
}

// traceAssembled: the template and the sizes (not the text).
func traceAssembled(sp *tracing.Span, j *job) {
	sp.String(attrTemplate, j.tmpl.Name+"@"+strconv.Itoa(j.tmpl.Version))
	sp.Bool(attrTruncated, j.prompt.ContextTruncated)
	sp.Int(attrBodyBytes, len(j.out))
}

// startRequestSpan starts the server span of a request that goes upstream (lr, routed: see
// routeOf), a child of the client's traceparent: named after its rewritten route, or "METHOD /v1/*"
// (the path's first segment) when passed through. Health checks and other paths are not traced. It
// returns r's context and nil when tracing is off.
func (s *Server) startRequestSpan(r *http.Request, id string, lr listenerRoute, routed bool) (context.Context, *tracing.Span) {
	t := s.opt.Tracing
	if t == nil || !routed {
		return r.Context(), nil
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	name := r.Method + " /" + first + "/*"
	if lr.sf != nil {
		name = r.Method + " " + lr.rt.Path()
	}
	ctx, sp := t.StartServer(t.Extract(r.Context(), propagation.HeaderCarrier(r.Header)), name)
	sp.String("http.request.method", r.Method)
	sp.String("url.path", r.URL.Path)
	sp.String(attrRequestID, id)
	return ctx, sp
}

// endRequestSpan ends the server span with the answer: status (499 for a client that went away),
// its route's label, protocol, template and the decisions the response headers report.
func endRequestSpan(sp *tracing.Span, status int, h http.Header, route string) {
	if sp == nil {
		return
	}
	sp.String(attrRoute, route)
	sp.Int("http.response.status_code", status)
	if v := h.Get(HeaderProtocol); v != "" {
		sp.String(attrProtocol, v)
	}
	if v := h.Get(HeaderTemplate); v != "" {
		sp.String(attrTemplate, v)
	}
	if v := h.Get(HeaderToolsRemoved); v != "" {
		sp.Int(attrToolsRemoved, strings.Count(v, ",")+1)
	}
	if n, err := strconv.Atoi(h.Get(HeaderBlocked)); err == nil {
		sp.Int(attrCallsBlocked, n)
	}
	if status >= 500 {
		sp.Error(strconv.Itoa(status))
	}
	sp.End()
}

// exchangeTrace is the tracing of one rewritten request's upstream call and response; its zero
// value (tracing off) does nothing.
type exchangeTrace struct {
	upstream                  *tracing.Span
	allowed, blocked, audited atomic.Int64
}

// traceUpstream starts the upstream span and sends its traceparent upstream in place of the
// client's.
func (s *Server) traceUpstream(pr *httputil.ProxyRequest, x *exchange) {
	t := s.opt.Tracing
	if t == nil {
		return
	}
	ctx, sp := t.Client(pr.In.Context(), tracing.SpanUpstream)
	sp.String("http.request.method", pr.Out.Method)
	sp.String("server.address", pr.Out.URL.Host)
	sp.String("url.path", pr.Out.URL.Path)
	t.Inject(ctx, propagation.HeaderCarrier(pr.Out.Header))
	x.trace.upstream = sp
}

// injectTrace sends the server span's traceparent upstream on a passed-through request.
func (s *Server) injectTrace(pr *httputil.ProxyRequest) {
	s.opt.Tracing.Inject(pr.In.Context(), propagation.HeaderCarrier(pr.Out.Header))
}

// upstreamDone ends the upstream span at the response headers.
func (t *exchangeTrace) upstreamDone(status int) {
	if t.upstream == nil {
		return
	}
	t.upstream.Int("http.response.status_code", status)
	if status >= 500 {
		t.upstream.Error(strconv.Itoa(status))
	}
	t.upstream.End()
}

// traceUpstreamFailed ends the upstream span of a request whose upstream call failed (or whose
// client went away), with the API error code.
func traceUpstreamFailed(r *http.Request, err error) {
	if x := inflightOf(r.Context()).x; x != nil && x.trace.upstream != nil {
		code := toAPIError(err).Code
		if r.Context().Err() != nil {
			code = "client_gone"
		}
		x.trace.upstream.Fail(err, code)
	}
}

// count wraps a decision recorder so that the vet and relay spans can report the decisions.
func (t *exchangeTrace) count(rec func(vet.Decision)) func(vet.Decision) {
	if t.upstream == nil {
		return rec
	}
	return func(d vet.Decision) {
		switch d.Verdict {
		case vet.VerdictAllowed, vet.VerdictConfirmed:
			t.allowed.Add(1)
		case vet.VerdictAudited:
			t.audited.Add(1)
		default:
			t.blocked.Add(1)
		}
		rec(d)
	}
}

// decisions sets the decision counts on sp.
func (t *exchangeTrace) decisions(sp *tracing.Span) {
	sp.Int(attrCallsAllowed, int(t.allowed.Load()))
	sp.Int(attrCallsBlocked, int(t.blocked.Load()))
	sp.Int(attrCallsAudited, int(t.audited.Load()))
}

// relay wraps a vetted stream so that sp, the relay stage's span, lasts until the stream ends (EOF,
// error or close); with a nil sp the stream is left as it is.
func (t *exchangeTrace) relay(sp *tracing.Span, body io.ReadCloser) io.ReadCloser {
	if sp == nil {
		return body
	}
	return &relayBody{ReadCloser: body, t: t, sp: sp}
}

type relayBody struct {
	io.ReadCloser
	t    *exchangeTrace
	sp   *tracing.Span
	once sync.Once
}

func (b *relayBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.end(err)
	}
	return n, err
}

func (b *relayBody) Close() error {
	b.end(nil)
	return b.ReadCloser.Close()
}

func (b *relayBody) end(err error) {
	b.once.Do(func() {
		b.t.decisions(b.sp)
		if err != nil && err != io.EOF {
			b.sp.Error("stream_error")
		}
		b.sp.End()
	})
}
