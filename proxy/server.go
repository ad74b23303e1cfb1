// Package proxy is promptgate's listener and its engine: it reads each request once, runs the stages of the
// pipeline in their one order (Engine.prepare in pipeline.go: validate, route, filter tools, context,
// assemble), forwards the prepared request upstream, and vets the response — stream or not — before the
// client sees it (Server.vetResponse). It holds the table of surfaces (proxy/surface/...) and iterates it. It
// does not build prompts, pick protocols, check tool calls or know an API's wire shape itself (assembly/,
// policy/, policy/vet and the surfaces do).
package proxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/learn"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/owners"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
	"github.com/promptgate/promptgate/proxy/surface/chat"
	"github.com/promptgate/promptgate/proxy/surface/messages"
	"github.com/promptgate/promptgate/proxy/surface/responses"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
	"github.com/promptgate/promptgate/proxy/telemetry/redact"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// Paths served by the proxy listener.
const (
	PathChat      = chat.Path
	PathResponses = responses.Path
	PathMessages  = messages.Path
	PathHealthz   = "/healthz"
	PathReadyz    = "/readyz"
)

// Options configure a Server.
type Options struct {
	Engine *Engine
	// Upstreams are the base URLs and operator keys of the upstream table's lines (upstreamTable), by name:
	// "openai" (required: /v1/X goes to <its URL>/X), "anthropic" (POST /v1/messages and every other
	// /v1/messages path go to <its URL>/messages...; default DefaultAnthropicUpstream) and "gemini" (every
	// /v1beta/X goes to <its URL>/v1beta/X; default https://generativelanguage.googleapis.com). A key is sent
	// as its line's Auth says on requests of that upstream whose URL has the key's origin, replacing the
	// client's credentials; on every other request they are forwarded as the client sent them, as are
	// anthropic-version and the like.
	Upstreams map[string]Upstream
	// Transport reaches the upstream; nil means NewTransport().
	Transport http.RoundTripper
	// Audit receives every policy decision; nil logs them.
	Audit audit.Recorder
	// AuditArguments puts each vetted tool call's arguments into its audit event (the config's
	// audit.includeArguments); when false an event keeps only their SHA-256 (argumentsSha256).
	AuditArguments bool
	// Degraded, when not nil and returning a reason, makes /readyz answer 503 {"status":"degraded"} (the
	// fleet store is unreachable and the last snapshot is served).
	Degraded func() string
	// Ready reports readiness for /readyz: false with a reason while not ready.
	Ready func() (bool, string)
	// Tools, when not nil, is told the tools each rewritten request declared, kept and removed (the admin
	// API's list of tools seen).
	Tools ToolWatcher
	// Confirmer issues and checks the confirmation codes of calls held by information-flow rules. Servers
	// that must accept each other's codes share one (the HTTPS-proxy door's, one per origin, share the
	// listener's); nil gives the Server its own, under a random key.
	Confirmer *flow.Confirmer
	// Violations remembers the conversations caught breaking a provenance, scan or flow rule (flow rules with
	// after ["violation"]); servers of one instance share one, like the Confirmer; nil gives the Server its own.
	Violations *flow.Violations
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Tracing, when not nil, records a server span per /v1/ request and a span per stage, and sends
	// promptgate's traceparent upstream; nil turns tracing off (the client's traceparent passes unchanged).
	Tracing *tracing.Tracing
	// Guard says which Hosts and browser origins are answered besides the loopback Hosts, the upstreams'
	// own host names (see admit) and same-origin or non-browser requests; nil adds none.
	Guard *guard.Policy
	// InFlight counts the requests being served, against limits.maxInFlight: Servers given the same counter
	// (the HTTPS-proxy door's, one per origin) share one cap. nil gives the Server its own.
	InFlight *atomic.Int64
	// Learn, when not nil, keeps what learn mode learns: of every request whose protocol runs in audit mode or
	// has a version in shadow, the tools offered and, for each call of the answer, where its argument values
	// came from (never a value). Servers of one instance share one.
	Learn *learn.Store
	// Owners binds what the upstream stores from answers relayed with a shared key to the client's
	// credential (see owned.go): Servers given the same record (the HTTPS-proxy door's pipelines and the
	// listener) serve each other's clients their objects. nil gives the Server its own.
	Owners *owners.Record
	// Observer, when not nil, is told what was decided for each rewritten request (`promptgate test`
	// reads its cases' outcomes from it); nil tells no one.
	Observer Observer
	Log      *slog.Logger
}

// Observer is told, for every rewritten request, its prepared form before it goes upstream and every
// decision on its answer's calls before it is recorded. It must be quick and safe for concurrent use, and
// must neither change nor keep what it is given past the call (a decision's Args included).
type Observer interface {
	Prepared(ctx context.Context, p *Prepared)
	Decided(ctx context.Context, d vet.Decision)
}

// ToolWatcher is told, for every rewritten request, which declared tools were kept and which removed, and
// of every call of an answer that was blocked. It must be quick and safe for concurrent use
// (proxy/toolseen implements it).
type ToolWatcher interface {
	Saw(protocol string, kept []policy.Tool, removed []policy.Removal)
	Blocked(tool string)
}

// Server is the proxy listener's handler.
type Server struct {
	opt       Options
	log       *slog.Logger
	upstreams map[string]*upstreamAt
	// routes are the listener's patterns that go upstream (rewritten and passed through), for the metrics
	// label and the span name of a request before it is routed.
	routes      map[string]listenerRoute
	rewritten   *httputil.ReverseProxy
	passthrough *httputil.ReverseProxy
	mux         *http.ServeMux
	// limits are the engine's, with the listener's defaults filled in.
	limits Limits
	// inFlight counts the requests being served, against limits.MaxInFlight (Options.InFlight).
	inFlight *atomic.Int64
	// upstream is the reverse proxies' transport, which the next rounds of a continued answer also go through.
	upstream http.RoundTripper
	// buffers are the reverse proxies' copy buffers, which also start each stream relay's event reader.
	buffers *bufferPool
	// owners binds stored objects to the credentials that created them (Options.Owners).
	owners *owners.Record
}

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

// inflight is what the listener keeps of a request in flight, carried in its context under one key: its
// id, its writer, its body under the read deadline, its route's label and, going upstream, its upstream
// and, on a rewritten route, its exchange.
type inflight struct {
	id    string
	sw    *statusWriter
	body  *deadlineBody // nil when the body has no read deadline
	route string        // the metrics label: a surface's name, "passthrough" or "other"
	up    *upstreamAt   // set by pass before the request goes upstream
	x     *exchange     // set by rewrite before the request goes upstream; nil on other routes
	// pt is the surface that edits the answer of a passed-through request, and in that request as the
	// client sent it (set by rewritePassthrough; nil otherwise).
	pt surface.Passthrough
	in *http.Request
}

// listenerRoute is a pattern of the listener that goes upstream: a surface's route (sf not nil) or an
// upstream's passed-through paths.
type listenerRoute struct {
	sf surface.Surface
	rt surface.Route
}

type inflightKey struct{}

// inflightOf is the request of ctx as the listener keeps it; the zero value outside a request.
func inflightOf(ctx context.Context) *inflight {
	if in, ok := ctx.Value(inflightKey{}).(*inflight); ok {
		return in
	}
	return &inflight{}
}

// New builds the handler.
func New(o Options) (*Server, error) {
	if o.Engine == nil {
		return nil, errors.New("proxy: engine and upstream are required")
	}
	ups, err := openUpstreams(o.Upstreams)
	if err != nil {
		return nil, err
	}
	for _, sf := range o.Engine.surfaces {
		if ups[sf.Upstream()] == nil {
			return nil, fmt.Errorf("proxy: surface %s names upstream %q, which is not in the table", sf.Name(), sf.Upstream())
		}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Transport == nil {
		o.Transport = NewTransport()
	}
	if o.Audit == nil {
		o.Audit = audit.Log{Logger: o.Log}
	}
	if o.Ready == nil {
		o.Ready = func() (bool, string) { return true, "" }
	}
	if o.InFlight == nil {
		o.InFlight = new(atomic.Int64)
	}
	if o.Owners == nil {
		o.Owners = owners.New(0)
	}
	if o.Confirmer == nil {
		cf, err := NewConfirmer("")
		if err != nil {
			return nil, err
		}
		o.Confirmer = cf
	}
	if o.Violations == nil {
		o.Violations = flow.NewViolations(0, 0, nil)
	}
	if o.Guard == nil {
		g, err := guard.New(guard.Config{})
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		o.Guard = g
	}
	limits := o.Engine.Limits()
	s := &Server{opt: o, log: o.Log, limits: limits, inFlight: o.InFlight, owners: o.Owners, upstreams: ups, routes: map[string]listenerRoute{}}
	tr := timeoutTransport{next: o.Transport, timeout: limits.UpstreamTimeout}
	s.upstream = tr
	buffers := newBufferPool()
	s.buffers = buffers
	s.rewritten = &httputil.ReverseProxy{
		Rewrite:   s.rewriteRequest,
		Transport: tr,
		// 0, not -1: net/http still flushes every write of a stream (text/event-stream, or a body of unknown
		// length); a vetted body of known length goes out in one write when the handler returns, with no
		// flush of its own.
		FlushInterval:  0,
		BufferPool:     buffers,
		ModifyResponse: s.vetResponse,
		ErrorHandler:   s.upstreamFailed,
		ErrorLog:       slog.NewLogLogger(o.Log.Handler(), slog.LevelWarn),
	}
	s.passthrough = &httputil.ReverseProxy{
		Rewrite:        s.rewritePassthrough,
		Transport:      tr,
		FlushInterval:  -1,
		BufferPool:     buffers,
		ModifyResponse: s.passResponse,
		ErrorHandler:   s.upstreamFailed,
		ErrorLog:       slog.NewLogLogger(o.Log.Handler(), slog.LevelWarn),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET "+PathReadyz, s.readyz)
	for _, sf := range o.Engine.surfaces {
		rm := o.Metrics.Route(sf.Name())
		for _, rt := range sf.Routes() {
			mux.HandleFunc(rt.Pattern, func(w http.ResponseWriter, r *http.Request) { s.rewrite(w, r, sf, rt, rm) })
			s.routes[rt.Pattern] = listenerRoute{sf: sf, rt: rt}
		}
	}
	for _, l := range upstreamTable() {
		up := ups[l.Name]
		for _, p := range l.Paths {
			mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { s.pass(w, r, up) })
			s.routes[p] = listenerRoute{}
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no route for %s %s on the proxy listener", r.Method, r.URL.Path)})
	})
	s.mux = mux
	return s, nil
}

// statusClientGone is the status recorded (never sent) for a request whose client went away before its
// answer was complete, as nginx and Traefik record it.
const statusClientGone = 499

// ServeHTTP implements http.Handler: it refuses what the listener does not serve (see admit), holds the
// reading of the body to limits.bodyReadTimeout, routes the request, and records its outcome in the metrics
// and the server span.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := RequestID(r, "pg-")
	w.Header().Set(HeaderRequestID, id)
	sw := &statusWriter{ResponseWriter: w}
	in := &inflight{id: id, sw: sw, route: "other"}
	lr, routed := s.routeOf(r)
	if routed {
		in.route = "passthrough"
		if lr.sf != nil {
			in.route = lr.sf.Name()
		}
	}
	ctx, span := s.startRequestSpan(r, id, lr, routed)
	var body *deadlineBody
	defer func() {
		// The reverse proxy aborts the handler with a panic when it cannot finish copying an answer.
		v := recover()
		body.handlerDone()
		s.served(r, in, span, v != nil)
		if v != nil {
			panic(v)
		}
	}()
	health := r.URL.Path == PathHealthz || r.URL.Path == PathReadyz
	if !s.admit(sw, r, id, health) {
		return
	}
	if !health {
		n := s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		if n > int64(s.limits.MaxInFlight) {
			sw.Header().Set("Retry-After", "1")
			writeError(sw, apiError{Status: http.StatusServiceUnavailable, Code: "overloaded",
				Message: fmt.Sprintf("promptgate is serving %d requests, its limit (limits.maxInFlight): retry shortly", s.limits.MaxInFlight)})
			return
		}
	}
	body = s.limitBodyRead(w, r)
	in.body = body
	s.mux.ServeHTTP(sw, r.WithContext(context.WithValue(ctx, inflightKey{}, in)))
}

// admit answers, and returns false for, a request the listener does not serve: a Host that is neither
// loopback, nor listed, nor the host name of an upstream (DNS rebinding: a page cannot borrow the name of a
// host whose DNS it does not control; the HTTPS-proxy door serves an intercepted origin under its own name;
// health checks are answered on any Host: probes address the pod's IP and carry nothing), an OPTIONS
// (answered here, never forwarded: a CORS preflight for an opted-in origin, else a refusal), a cross-site
// browser request. An opted-in origin's answer gets its CORS headers here.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, id string, health bool) bool {
	g := s.opt.Guard
	var ref *guard.Refusal
	if !health {
		if ref = g.CheckHost(r); ref != nil && s.upstreamHost(r.Host) {
			ref = nil
		}
	}
	if ref == nil && r.Method == http.MethodOptions {
		if ref = g.Preflight(w, r); ref == nil {
			return false
		}
	}
	if ref == nil {
		ref = g.CheckBrowser(r)
	}
	if ref != nil {
		s.log.Debug("request refused by the listener", "request_id", id, "status", ref.Status, "code", ref.Code)
		writeError(w, apiError{Status: ref.Status, Code: ref.Code, Message: ref.Message})
		return false
	}
	g.Allow(w.Header(), r)
	return true
}

// upstreamHost reports whether host is the host name of an upstream.
func (s *Server) upstreamHost(host string) bool {
	for _, up := range s.upstreams {
		if guard.SameHost(host, up.base.Host) {
			return true
		}
	}
	return false
}

// served records the outcome of a request in the metrics and ends its server span. A client that went away
// before its answer was complete — nothing written yet, the answer aborted, a write failed, a stream cut —
// counts as 499, not as the status its answer began with.
func (s *Server) served(r *http.Request, in *inflight, span *tracing.Span, aborted bool) {
	sw := in.sw
	status := sw.status
	switch {
	case r.Context().Err() != nil && (status == 0 || aborted || sw.failed || sw.gone.Load()):
		status = statusClientGone
	case status == 0:
		status = http.StatusOK
	}
	endRequestSpan(span, status, sw.Header(), in.route)
	if s.opt.Metrics != nil {
		s.opt.Metrics.Request(sw.Header().Get(HeaderProtocol), in.route, status)
	}
}

// statusWriter remembers the status code, whether a write failed and whether a stage saw the client go
// away; Unwrap lets http.ResponseController reach Flush and the deadlines.
type statusWriter struct {
	http.ResponseWriter
	status int
	failed bool
	gone   atomic.Bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	if err != nil {
		w.failed = true
	}
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// limitBodyRead puts a request's body under limits.bodyReadTimeout: all of it must arrive within that time
// (408 request_timeout past it). The deadline is on reading the request only: it is cleared at the body's
// end, so that it never cuts an answer short. nil when the request has no body, or the ResponseWriter has no
// deadlines.
func (s *Server) limitBodyRead(w http.ResponseWriter, r *http.Request) *deadlineBody {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(s.limits.BodyReadTimeout)) != nil {
		return nil
	}
	b := &deadlineBody{ReadCloser: r.Body, rc: rc}
	r.Body = b
	return b
}

// deadlineBody is a request body read under the body-read deadline.
type deadlineBody struct {
	io.ReadCloser
	rc *http.ResponseController
	mu sync.Mutex
	// done: the deadline was cleared, or the handler returned (the controller may no longer be used).
	done     bool
	timedOut atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.mu.Lock()
		if !b.done {
			_ = b.rc.SetReadDeadline(time.Time{})
			b.done = true
		}
		b.mu.Unlock()
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		b.timedOut.Store(true)
		err = fmt.Errorf("%w: %w", errBodyTimeout, err)
	}
	return n, err
}

// handlerDone stops b from touching the connection's deadline once the handler has returned (the upstream
// transport may still read the body then); a nil b does nothing.
func (b *deadlineBody) handlerDone() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
}

// bodyTimedOut reports whether r's body went past the body-read deadline.
func bodyTimedOut(r *http.Request) bool {
	b := inflightOf(r.Context()).body
	return b != nil && b.timedOut.Load()
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if ok, reason := s.opt.Ready(); !ok {
		writeJSON(w, http.StatusServiceUnavailable, []byte(`{"status":"not_ready","reason":`+string(assembly.JSONString(reason))+`}`))
		return
	}
	if s.opt.Degraded != nil {
		if reason := s.opt.Degraded(); reason != "" {
			writeJSON(w, http.StatusServiceUnavailable, []byte(`{"status":"degraded","reason":`+string(assembly.JSONString(reason))+`}`))
			return
		}
	}
	writeJSON(w, http.StatusOK, []byte(`{"status":"ready"}`))
}

// routeOf is the listener's route of a request that goes upstream (rewritten or passed through), by its
// pattern; routed is false for any other request (health checks, unknown paths).
func (s *Server) routeOf(r *http.Request) (lr listenerRoute, routed bool) {
	_, pattern := s.mux.Handler(r)
	lr, routed = s.routes[pattern]
	return lr, routed
}

// rewrite serves a rewritten route, top to bottom: the body is read under the size cap; the request side of
// the pipeline prepares it (Engine.prepare); its decisions go to the response headers, the decision log and the
// metrics; the surface starts the response side; the prepared body goes upstream (rewriteRequest) and the
// answer comes back through the response side (vetResponse).
func (s *Server) rewrite(w http.ResponseWriter, r *http.Request, sf surface.Surface, rt surface.Route, rm *metrics.Route) {
	start := time.Now()
	in := inflightOf(r.Context())
	id := in.id
	log := requestLogger(s.log, id)
	query := r.URL.Query()
	t, ok, err := routeTarget(rt, r.PathValue, query)
	if err == nil && !ok {
		in.route = "passthrough"
		s.pass(w, r, s.upstreams[sf.Upstream()])
		return
	}
	if err != nil {
		fail(w, log, err)
		return
	}
	body, err := readBody(w, r, s.limits.MaxBodyBytes)
	if err != nil {
		if r.Context().Err() != nil && !errors.Is(err, errBodyTimeout) {
			log.Debug("client went away while sending its body", "err", err)
			return
		}
		fail(w, log, err)
		return
	}
	prep, err := s.opt.Engine.prepare(r.Context(), Input{Path: r.URL.Path, Query: query, Header: r.Header, Body: body,
		Confirmer: s.opt.Confirmer, Violations: s.opt.Violations, Learn: s.opt.Learn != nil}, sf, t)
	if err != nil {
		var re *refusedError
		if errors.As(err, &re) {
			s.opt.Audit.Record(r.Context(), eventsOf(id, re.protocol).refused(re))
		}
		fail(w, log, err)
		return
	}
	created, cred, shared := s.bindsCreated(r, sf)
	if st, ok := sf.(surface.Stored); shared && ok && s.refuseForeign(w, log, st, st.BodyNames(body), cred) {
		return
	}
	s.announce(r.Context(), w.Header(), id, log, prep)
	if s.opt.Observer != nil {
		s.opt.Observer.Prepared(r.Context(), prep)
	}
	rm.Overhead(time.Since(start))
	in.x = s.begin(id, log, body, prep, rm, created)
	in.x.ctx = r.Context()
	in.x.conversation = firstNonEmpty(strings.TrimSpace(r.Header.Get(HeaderConversation)), prep.Extension.Conversation)
	s.rewritten.ServeHTTP(w, r)
}

// announce makes a prepared request's decisions known: the response headers, the decision log (tools removed,
// a stored prompt forwarded), the memory of tools seen, the metrics and the log.
func (s *Server) announce(ctx context.Context, h http.Header, id string, log *slog.Logger, prep *Prepared) {
	if s.opt.Tools != nil {
		s.opt.Tools.Saw(prep.Protocol.ID, prep.Kept, prep.Removed)
	}
	h.Set(HeaderProtocol, prep.Protocol.ID)
	h.Set(HeaderTemplate, prep.Template.Name+"@"+strconv.Itoa(prep.Template.Version))
	evs := eventsOf(id, prep.Protocol)
	if len(prep.Removed) > 0 {
		names := make([]string, len(prep.Removed))
		for i, rm := range prep.Removed {
			names[i] = rm.Name
			s.opt.Audit.Record(ctx, evs.removed(rm))
		}
		h.Set(HeaderToolsRemoved, strings.Join(names, ","))
	}
	if prep.StoredPrompt != "" {
		reason := fmt.Sprintf("stored prompt %q forwarded: its tools and instructions are applied upstream, unseen; protocol %q allows every tool", prep.StoredPrompt, prep.Protocol.ID)
		s.opt.Audit.Record(ctx, evs.storedPromptForwarded(reason))
		log.Info("stored prompt forwarded ungoverned", "prompt_id", prep.StoredPrompt, "protocol", prep.Protocol.ID)
	}
	if prep.Prompt.ContextTruncated {
		s.opt.Metrics.ContextTruncated()
	}
	if prep.Shadow != nil {
		s.opt.Metrics.ShadowRequest(prep.Prompt.Sizes.FilledChars, prep.Shadow.Sizes.FilledChars)
		for _, ev := range evs.shadowTools(prep) {
			s.opt.Audit.Record(ctx, ev)
		}
	}
	if prep.learn != nil && s.opt.Learn != nil {
		names := make([]string, len(prep.Kept))
		for i, t := range prep.Kept {
			names[i] = t.Name
		}
		s.opt.Learn.Offered(prep.Protocol.ID, names)
	}
	for _, n := range prep.Notes {
		log.Info(n)
	}
	if log.Enabled(ctx, slog.LevelDebug) { // the arguments are built only for a line that is written
		log.Debug("forwarding", "route", prep.Surface.Name(), "protocol", prep.Protocol.ID, "template", prep.Template.Name, "stream", prep.Stream, "tools_kept", len(prep.Kept), "tools_removed", len(prep.Removed))
	}
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

// pass forwards a request of an upstream's paths (every other /v1/*, /v1beta/* request) to it unchanged.
func (s *Server) pass(w http.ResponseWriter, r *http.Request, up *upstreamAt) {
	inflightOf(r.Context()).up = up
	if p := s.disguisedRoute(r); p != "" {
		writeError(w, apiError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no route for %s %s on the proxy listener: it spells %s, which is only served as POST %s", r.Method, r.URL.EscapedPath(), p, p)})
		return
	}
	if s.refusePassedForeign(w, r) {
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		// The request body streams to the upstream while its answer streams back. Without full duplex,
		// net/http closes the body once the answer's headers go out, and the transport's last read of it
		// (looking for its end) then fails, which makes the transport drop the upstream connection in the
		// middle of the answer. HTTP/2 is always full duplex (the error is ignored there).
		_ = http.NewResponseController(w).EnableFullDuplex()
		// Full duplex leaves the body to the handler, and the transport may still read it after the answer
		// (or never): closed here, the body waits for a read in flight, reads its own end while the handler
		// runs, and fails every later read without touching the connection (see doneBody).
		defer doneBody(r.Body)
	}
	s.passthrough.ServeHTTP(w, r)
}

// doneBody ends a passed-through request's body before its handler returns. With full duplex on, net/http's
// HTTP/1 server reads what is left of a body after the handler, and a read that reaches the body's end starts
// a background read of the connection, which the server stops only before that: a body read to its end after
// the handler (by the transport, still sending it upstream, or by the server, where the transport never read
// it) left that read running, and the server's next read of the connection panicked (golang/go#68560). Close
// waits for a read in flight (the body's lock), reads the rest here, and fails every later read at once.
func doneBody(b io.ReadCloser) { _ = b.Close() }

// outboundHeaders removes promptgate's own headers and applies the upstream's operator key where the
// request's URL, as it goes out, has that key's origin, as the upstream's Auth says (the client's credentials
// it replaces removed). Anywhere else the client's credentials pass unchanged.
func outboundHeaders(h http.Header, out *url.URL, up *upstreamAt) {
	dropOwnHeaders(h)
	if up.key.sendsTo(out) {
		up.Auth.apply(h, out, up.key.Secret)
	}
}

func (s *Server) rewriteRequest(pr *httputil.ProxyRequest) {
	x := inflightOf(pr.In.Context()).x
	up := s.upstreams[x.prep.Surface.Upstream()]
	pr.Out.URL = up.url(pr.In.URL)
	pr.Out.Host = ""
	outboundHeaders(pr.Out.Header, pr.Out.URL, up)
	// The response is parsed to vet it: it is asked for uncompressed (NewTransport).
	pr.Out.Header.Del("Accept-Encoding")
	pr.Out.Body = io.NopCloser(bytes.NewReader(x.prep.Body))
	pr.Out.ContentLength = int64(len(x.prep.Body))
	pr.Out.Header.Set("Content-Length", strconv.Itoa(len(x.prep.Body)))
	pr.Out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(x.prep.Body)), nil }
	s.traceUpstream(pr, x)
	x.sent = time.Now()
}

func (s *Server) rewritePassthrough(pr *httputil.ProxyRequest) {
	up := inflightOf(pr.In.Context()).up
	pr.Out.URL = up.url(pr.In.URL)
	pr.Out.Host = ""
	outboundHeaders(pr.Out.Header, pr.Out.URL, up)
	if pt := s.interceptor(pr.In); pt != nil {
		// The answer is edited: it is asked for uncompressed (NewTransport), and read as the upstream sent it.
		pr.Out.Header.Del("Accept-Encoding")
		in := inflightOf(pr.In.Context())
		in.pt, in.in = pt, pr.In
	}
	s.injectTrace(pr)
}

// upstreamHeaders keeps the upstream's request id under another name and drops headers that only
// promptgate may set: its own, and the CORS headers (the listener alone decides which pages may read it).
func upstreamHeaders(h http.Header) {
	if v := h.Get(HeaderRequestID); v != "" {
		h.Set(HeaderUpstreamReqID, v)
		h.Del(HeaderRequestID)
	}
	dropOwnHeaders(h)
	guard.DropCORS(h)
}

// dropOwnHeaders deletes the X-Promptgate-* fields of h in any letter case, also spelt with underscores
// (gateways and CGI-style readers fold "_" and "-" together): a client's going upstream, an upstream's
// coming back.
func dropOwnHeaders(h http.Header) {
	for k := range h {
		if len(k) >= len("X-Promptgate-") && strings.EqualFold(strings.ReplaceAll(k[:len("X-Promptgate-")], "_", "-"), "X-Promptgate-") {
			delete(h, k)
		}
	}
}

// guardTrailers keeps the upstream from sending as trailers the headers only promptgate may set (its own,
// the CORS headers): they are dropped from the announced trailers now and, since the transport fills
// trailers in only when the body ends, again then.
func guardTrailers(resp *http.Response, buffers *bufferPool) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return // an upgraded connection has no trailers, and its body must stay writable
	}
	dropTrailers(resp.Trailer)
	resp.Body = &trailerGuard{ReadCloser: resp.Body, resp: resp, buffers: buffers}
}

// dropTrailers deletes from trailers the fields only promptgate may set.
func dropTrailers(h http.Header) {
	dropOwnHeaders(h)
	guard.DropCORS(h)
}

// trailerGuard is a response body that drops the fields only promptgate may set from the trailers once it
// ends.
type trailerGuard struct {
	io.ReadCloser
	resp *http.Response
	// buffers lends a stream's relay its event reader's buffer (relay.BufferLender).
	buffers *bufferPool
}

// LendBuffer lends a relay of this body a copy buffer of the proxy's pool (relay.BufferLender).
func (g *trailerGuard) LendBuffer() []byte { return g.buffers.Get() }

// ReturnBuffer takes back a buffer LendBuffer lent.
func (g *trailerGuard) ReturnBuffer(buf []byte) { g.buffers.Put(buf) }

func (g *trailerGuard) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	if err != nil {
		dropTrailers(g.resp.Trailer)
	}
	return n, err
}

// Finish finishes the guarded body (relay.Finisher), with the trailers that come at its end guarded too.
func (g *trailerGuard) Finish() {
	if f, ok := g.ReadCloser.(relay.Finisher); ok {
		f.Finish()
		dropTrailers(g.resp.Trailer)
	}
}

func (s *Server) passResponse(resp *http.Response) error {
	s.maskKeys(resp)
	upstreamHeaders(resp.Header)
	guardTrailers(resp, s.buffers)
	if in := inflightOf(resp.Request.Context()); in.pt != nil {
		return in.pt.Passed(in.in, resp, host{s})
	}
	return nil
}

// interceptor is the surface that must see the answer to a passed-through request, or nil.
func (s *Server) interceptor(r *http.Request) surface.Passthrough {
	for _, sf := range s.opt.Engine.surfaces {
		if pt, ok := sf.(surface.Passthrough); ok && pt.Intercepts(r) {
			return pt
		}
	}
	return nil
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

// relayed wraps a vetted stream so that its end is logged and a client gone counts as 499.
func (s *Server) relayed(ctx context.Context, log *slog.Logger, body io.ReadCloser) io.ReadCloser {
	return &loggedStream{ReadCloser: body, log: log, out: inflightOf(ctx).sw}
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

// upstreamFailed answers when the upstream could not be reached, timed out, or answered malformed.
func (s *Server) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	err = redact.Error(err) // the log and the client's message show no user info or query of a URL
	traceUpstreamFailed(r, err)
	log := s.log
	if id := inflightOf(r.Context()).id; id != "" {
		log = log.With("request_id", id)
	}
	if bodyTimedOut(r) {
		err = errBodyTimeout
	} else if r.Context().Err() != nil {
		log.Info("client went away; upstream call cancelled", "err", err)
		return
	}
	e := toAPIError(err)
	if e.Code == "internal_error" {
		e = apiError{Status: http.StatusBadGateway, Code: "upstream_error", Message: "upstream unreachable: " + err.Error()}
	}
	log.Warn("upstream failed", "status", e.Status, "code", e.Code, "err", err)
	writeError(w, e)
}

// errBodyTimeout: the request body did not arrive within limits.bodyReadTimeout.
var errBodyTimeout = errors.New("request body timeout")

// firstBodyBuffer is the buffer readBody starts with: an announced length is not trusted beyond it.
const firstBodyBuffer = 64 << 10

// readBody reads the whole request body under the size cap. Its buffer costs what was sent, not what was
// announced: it starts at firstBodyBuffer (or the announced length, when smaller) and doubles as bytes
// arrive, never past the announced length or the cap (plus one byte, which sees the end without growing).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	most := limit + 1
	if r.ContentLength >= 0 {
		most = r.ContentLength + 1
	}
	buf := make([]byte, 0, min(most, firstBodyBuffer))
	for {
		if len(buf) == cap(buf) {
			ceiling := most
			if int64(len(buf)) >= ceiling {
				ceiling = limit + 1 // longer than announced: only the cap holds
			}
			buf = slices.Grow(buf, int(max(min(int64(cap(buf)), ceiling-int64(len(buf))), 1)))
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// requestLogger is log.With("request_id", id), except that the attribute is formatted only when a record
// is written: most requests write none (the per-request lines are at debug level), and With formats it at
// once (6 allocations with the JSON handler).
func requestLogger(log *slog.Logger, id string) *slog.Logger {
	return slog.New(lazyAttr{next: log.Handler(), attr: slog.String("request_id", id)})
}

// lazyAttr is a handler with one attribute added as next.WithAttrs would add it, at the first record.
type lazyAttr struct {
	next slog.Handler
	attr slog.Attr
}

func (h lazyAttr) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h lazyAttr) Handle(ctx context.Context, r slog.Record) error {
	return h.next.WithAttrs([]slog.Attr{h.attr}).Handle(ctx, r)
}

func (h lazyAttr) WithAttrs(as []slog.Attr) slog.Handler {
	return h.next.WithAttrs([]slog.Attr{h.attr}).WithAttrs(as)
}

func (h lazyAttr) WithGroup(name string) slog.Handler {
	return h.next.WithAttrs([]slog.Attr{h.attr}).WithGroup(name)
}

// RequestID takes a well-formed client X-Request-Id (at most 128 letters, digits and -_.:), else makes one:
// prefix and 24 hex digits from the runtime's random source (math/rand/v2: ChaCha8 seeded by the OS, no system
// call). An id must be unique, not secret: a client may choose its own.
func RequestID(r *http.Request, prefix string) string {
	if v := r.Header.Get(HeaderRequestID); v != "" && len(v) <= 128 && strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:") == "" {
		return v
	}
	var raw [12]byte
	binary.LittleEndian.PutUint64(raw[:8], rand.Uint64())
	binary.LittleEndian.PutUint32(raw[8:], rand.Uint32())
	var buf [64]byte
	return string(hex.AppendEncode(append(buf[:0], prefix...), raw[:]))
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// bufferPool lends the reverse proxies their 32 KiB copy buffers (httputil.BufferPool), instead of one new
// buffer per response.
type bufferPool struct{ p sync.Pool }

const proxyBufferSize = 32 << 10

func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, proxyBufferSize); return &b }}}
}

func (b *bufferPool) Get() []byte { return *(b.p.Get().(*[]byte)) }

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) != proxyBufferSize {
		return
	}
	buf = buf[:proxyBufferSize]
	b.p.Put(&buf)
}

// loggedStream logs, when the relay is closed, why an upstream stream broke off: the client was sent
// upstream_stream_truncated then, and the operator should see the cause. A stream cut because the client went
// away marks out (may be nil) so that the request counts as 499.
type loggedStream struct {
	io.ReadCloser
	log *slog.Logger
	out *statusWriter
}

func (l *loggedStream) Close() error {
	if e, ok := l.ReadCloser.(interface{ Err() error }); ok {
		switch err := e.Err(); {
		case err == nil:
		case errors.Is(err, context.Canceled):
			l.log.Debug("stream ended: the client went away", "err", err)
			if l.out != nil {
				l.out.gone.Store(true)
			}
		default:
			l.log.Warn("upstream stream broke off; the client got upstream_stream_truncated", "err", err)
		}
	}
	return l.ReadCloser.Close()
}
