// Package proxy is promptgate's listener and its engine: it reads each request once, runs the
// request side of the pipeline in its one order (Engine.prepare in pipeline.go: validate, route,
// filter tools, context, flow, assemble), forwards the prepared request upstream, and runs the
// response side in its one order (Server.respond in response.go), which vets the answer — stream or
// not — before the client sees it. It holds the table of surfaces (proxy/surface/...) and iterates
// it. It does not build prompts, pick protocols, check tool calls or know an API's wire shape
// itself (assembly/, policy/, policy/vet and the surfaces do).
package proxy

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
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
	"github.com/promptgate/promptgate/proxy/surface"
	"github.com/promptgate/promptgate/proxy/surface/chat"
	"github.com/promptgate/promptgate/proxy/surface/messages"
	"github.com/promptgate/promptgate/proxy/surface/responses"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
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
	// Upstreams are the base URLs and operator keys of the upstream table's lines (upstreamTable),
	// by name: "openai" (required: /v1/X goes to <its URL>/X), "anthropic" (POST /v1/messages and
	// every other /v1/messages path go to <its URL>/messages...; default DefaultAnthropicUpstream)
	// and "gemini" (every /v1beta/X goes to <its URL>/v1beta/X; default
	// https://generativelanguage.googleapis.com). A key is sent as its line's Auth says on requests
	// of that upstream whose URL has the key's origin, replacing the client's credentials; on every
	// other request they are forwarded as the client sent them, as are anthropic-version and the
	// like.
	Upstreams map[string]Upstream
	// Transport reaches the upstream; nil means NewTransport().
	Transport http.RoundTripper
	// Audit receives every policy decision; nil logs them.
	Audit audit.Recorder
	// AuditArguments puts each vetted tool call's arguments into its audit event (the config's
	// audit.includeArguments); when false an event keeps only their SHA-256 (argumentsSha256).
	AuditArguments bool
	// Degraded, when not nil and returning a reason, makes /readyz answer 503 {"status":"degraded"}
	// (the fleet store is unreachable and the last snapshot is served).
	Degraded func() string
	// Ready reports readiness for /readyz: false with a reason while not ready.
	Ready func() (bool, string)
	// Tools, when not nil, is told the tools each rewritten request declared, kept and removed (the
	// admin API's list of tools seen).
	Tools ToolWatcher
	// Confirmer issues and checks the confirmation codes of calls held by information-flow rules.
	// Servers that must accept each other's codes share one (the HTTPS-proxy door's, one per
	// origin, share the listener's); nil gives the Server its own, under a random key.
	Confirmer *flow.Confirmer
	// Violations remembers the conversations caught breaking a provenance, scan or flow rule (flow
	// rules with after ["violation"]); servers of one instance share one, like the Confirmer; nil
	// gives the Server its own.
	Violations *flow.Violations
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Tracing, when not nil, records a server span per /v1/ request and a span per stage, and sends
	// promptgate's traceparent upstream; nil turns tracing off (the client's traceparent passes
	// unchanged).
	Tracing *tracing.Tracing
	// Guard says which Hosts and browser origins are answered besides the loopback Hosts, the
	// upstreams' own host names (see admit) and same-origin or non-browser requests; nil adds none.
	Guard *guard.Policy
	// InFlight counts the requests being served, against limits.maxInFlight: Servers given the same
	// counter (the HTTPS-proxy door's, one per origin) share one cap. nil gives the Server its own.
	InFlight *atomic.Int64
	// Learn, when not nil, keeps what learn mode learns: of every request whose protocol runs in
	// audit mode or has a version in shadow, the tools offered and, for each call of the answer,
	// where its argument values came from (never a value). Servers of one instance share one.
	Learn *learn.Store
	// Owners binds what the upstream stores from answers relayed with a shared key to the client's
	// credential (see owned.go): Servers given the same record (the HTTPS-proxy door's pipelines
	// and the listener) serve each other's clients their objects. nil gives the Server its own.
	Owners *owners.Record
	// Observer, when not nil, is told what was decided for each rewritten request (`promptgate
	// test` reads its cases' outcomes from it); nil tells no one.
	Observer Observer
	Log      *slog.Logger
}

// Observer is told, for every rewritten request, its prepared form before it goes upstream and
// every decision on its answer's calls before it is recorded. It must be quick and safe for
// concurrent use, and must neither change nor keep what it is given past the call (a decision's
// Args included).
type Observer interface {
	Prepared(ctx context.Context, p *Prepared)
	Decided(ctx context.Context, d vet.Decision)
}

// ToolWatcher is told, for every rewritten request, which declared tools were kept and which
// removed, and of every call of an answer that was blocked. It must be quick and safe for
// concurrent use (proxy/toolseen implements it).
type ToolWatcher interface {
	Saw(protocol string, kept []policy.Tool, removed []policy.Removal)
	Blocked(tool string)
}

// Server is the proxy listener's handler.
type Server struct {
	opt       Options
	log       *slog.Logger
	upstreams map[string]*upstreamAt
	// routes are the listener's patterns that go upstream (rewritten and passed through), for the
	// metrics label and the span name of a request before it is routed.
	routes      map[string]listenerRoute
	rewritten   *httputil.ReverseProxy
	passthrough *httputil.ReverseProxy
	mux         *http.ServeMux
	// limits are the engine's, with the listener's defaults filled in.
	limits Limits
	// inFlight counts the requests being served, against limits.MaxInFlight (Options.InFlight).
	inFlight *atomic.Int64
	// upstream is the reverse proxies' transport, which the next rounds of a continued answer also
	// go through.
	upstream http.RoundTripper
	// buffers are the reverse proxies' copy buffers, which also start each stream relay's event
	// reader.
	buffers *bufferPool
	// owners binds stored objects to the credentials that created them (Options.Owners).
	owners *owners.Record
}

// inflight is what the listener keeps of a request in flight, carried in its context under one key:
// its id, its writer, its body under the read deadline, its route's label and, going upstream, its
// upstream and, on a rewritten route, its exchange.
type inflight struct {
	id    string
	sw    *statusWriter
	body  *deadlineBody // nil when the body has no read deadline
	route string        // the metrics label: a surface's name, "passthrough" or "other"
	up    *upstreamAt   // set by pass before the request goes upstream
	x     *exchange     // set by rewrite before the request goes upstream; nil on other routes
	// pt is the surface that edits the answer of a passed-through request, and in that request as
	// the client sent it (set by rewritePassthrough; nil otherwise).
	pt surface.Passthrough
	in *http.Request
	// writer is what sw points to in a request the listener serves: one allocation for both.
	writer statusWriter
}

// listenerRoute is a pattern of the listener that goes upstream: a surface's route (sf not nil) or
// an upstream's passed-through paths.
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
	if o, err = withDefaults(o); err != nil {
		return nil, err
	}
	limits := o.Engine.Limits()
	s := &Server{opt: o, log: o.Log, limits: limits, inFlight: o.InFlight, owners: o.Owners, upstreams: ups, routes: map[string]listenerRoute{}}
	s.upstream = timeoutTransport{next: o.Transport, timeout: limits.UpstreamTimeout}
	s.buffers = newBufferPool()
	s.rewritten, s.passthrough = s.reverseProxies()
	s.mux = s.serveMux()
	return s, nil
}

// withDefaults fills in the options left nil.
func withDefaults(o Options) (Options, error) {
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
			return o, err
		}
		o.Confirmer = cf
	}
	if o.Violations == nil {
		o.Violations = flow.NewViolations(0, 0, nil)
	}
	if o.Guard == nil {
		g, err := guard.New(guard.Config{})
		if err != nil {
			return o, fmt.Errorf("proxy: %w", err)
		}
		o.Guard = g
	}
	return o, nil
}

// serveMux routes the listener's requests: the health checks, each surface's rewritten routes, each
// upstream's passed-through paths, and a 404 for the rest.
func (s *Server) serveMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathHealthz, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, []byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET "+PathReadyz, s.readyz)
	for _, sf := range s.opt.Engine.surfaces {
		rm := s.opt.Metrics.Route(sf.Name())
		for _, rt := range sf.Routes() {
			mux.HandleFunc(rt.Pattern, func(w http.ResponseWriter, r *http.Request) { s.rewrite(w, r, sf, rt, rm) })
			s.routes[rt.Pattern] = listenerRoute{sf: sf, rt: rt}
		}
	}
	for _, l := range upstreamTable() {
		up := s.upstreams[l.Name]
		for _, p := range l.Paths {
			mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { s.pass(w, r, up) })
			s.routes[p] = listenerRoute{}
		}
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no route for %s %s on the proxy listener", r.Method, r.URL.Path)})
	})
	return mux
}

// ServeHTTP implements http.Handler: it refuses what the listener does not serve (see admit), holds
// the reading of the body to limits.bodyReadTimeout, routes the request, and records its outcome in
// the metrics and the server span.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := RequestID(r, "pg-")
	w.Header().Set(HeaderRequestID, id)
	in := &inflight{id: id, route: "other", writer: statusWriter{ResponseWriter: w}}
	sw := &in.writer
	in.sw = sw
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
		// The reverse proxy aborts the handler with a panic when it cannot finish copying an
		// answer.
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

// admit answers, and returns false for, a request the listener does not serve: a Host that is
// neither loopback, nor listed, nor the host name of an upstream (DNS rebinding: a page cannot
// borrow the name of a host whose DNS it does not control; the HTTPS-proxy door serves an
// intercepted origin under its own name; health checks are answered on any Host: probes address the
// pod's IP and carry nothing), an OPTIONS (answered here, never forwarded: a CORS preflight for an
// opted-in origin, else a refusal), a cross-site browser request. An opted-in origin's answer gets
// its CORS headers here.
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

// routeOf is the listener's route of a request that goes upstream (rewritten or passed through), by
// its pattern; routed is false for any other request (health checks, unknown paths).
func (s *Server) routeOf(r *http.Request) (lr listenerRoute, routed bool) {
	_, pattern := s.mux.Handler(r)
	lr, routed = s.routes[pattern]
	return lr, routed
}

// rewrite serves a rewritten route, top to bottom: the body is read under the size cap; the request
// side of the pipeline prepares it (Engine.prepare); its decisions go to the response headers, the
// decision log and the metrics; the surface starts the response side; the prepared body goes
// upstream (rewriteRequest) and the answer comes back through the response side (respond).
func (s *Server) rewrite(w http.ResponseWriter, r *http.Request, sf surface.Surface, rt surface.Route, rm *metrics.Route) {
	start := time.Now()
	in := inflightOf(r.Context())
	id := in.id
	log := requestLogger(s.log, id)
	var query url.Values // nil for none (Input.Query)
	if r.URL.RawQuery != "" {
		query = r.URL.Query()
	}
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
	body, ok := s.rewrittenBody(w, r, log)
	if !ok {
		return
	}
	prep, err := s.opt.Engine.prepare(r.Context(), Input{Path: r.URL.Path, Query: query, Header: r.Header, Body: body,
		Confirmer: s.opt.Confirmer, Violations: s.opt.Violations, Learn: s.opt.Learn != nil}, sf, t)
	if err != nil {
		s.refused(w, r, log, err)
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

// refused answers a request the request side did not prepare; a refusal by policy goes to the
// decision log.
func (s *Server) refused(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var re *refusedError
	if errors.As(err, &re) {
		s.opt.Audit.Record(r.Context(), eventsOf(inflightOf(r.Context()).id, re.protocol).refused(re))
	}
	fail(w, log, err)
}

// RequestID takes a well-formed client X-Request-Id (at most 128 letters, digits and -_.:), else
// makes one: prefix and 24 hex digits from the runtime's random source (math/rand/v2: ChaCha8
// seeded by the OS, no system call). An id must be unique, not secret: a client may choose its own.
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
