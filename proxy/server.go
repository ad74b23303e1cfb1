// Package proxy is promptgate's listener: it reads and validates each request once, runs the pipeline
// (policy → context → assembly) through the Engine, forwards the rewritten request upstream, and vets the
// response — stream or not — before the client sees it. The order of the stages lives here, in one place.
// It does not build prompts, pick protocols or check tool calls itself (assembly/, policy/, policy/vet do).
package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/anthvet"
	"github.com/promptgate/promptgate/proxy/chatvet"
	"github.com/promptgate/promptgate/proxy/metrics"
	"github.com/promptgate/promptgate/proxy/respvet"
	"github.com/promptgate/promptgate/proxy/tracing"
)

// Paths served by the proxy listener.
const (
	PathChat      = "/v1/chat/completions"
	PathResponses = "/v1/responses"
	PathMessages  = "/v1/messages"
	PathHealthz   = "/healthz"
	PathReadyz    = "/readyz"
)

// DefaultAnthropicUpstream is the Anthropic base URL used when Options.AnthropicUpstream is nil.
const DefaultAnthropicUpstream = "https://api.anthropic.com/v1"

// maxUpstreamBody caps a non-stream upstream answer that is read whole to be vetted.
const maxUpstreamBody = 64 << 20

// Options configure a Server.
type Options struct {
	Engine *Engine
	// Upstream is the OpenAI-compatible base URL; /v1/X goes to Upstream + "/X".
	Upstream *url.URL
	// UpstreamAPIKey, when set, replaces the client's Authorization header on requests to Upstream. It is
	// never sent to the Anthropic upstream.
	UpstreamAPIKey string
	// AnthropicUpstream is the Anthropic Messages base URL: POST /v1/messages (rewritten) and every other
	// /v1/messages/... path (passed through) go to AnthropicUpstream + "/messages...". nil means
	// DefaultAnthropicUpstream.
	AnthropicUpstream *url.URL
	// AnthropicAPIKey, when set, is sent as x-api-key to the Anthropic upstream, replacing the client's
	// x-api-key and Authorization headers; when empty they are forwarded as the client sent them, as is
	// anthropic-version (and anthropic-beta).
	AnthropicAPIKey string
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
	// StoredResponses bounds the per-instance memory of Responses answers that had a blocked call or were
	// created in the background (0 means 10,000); see stored.go.
	StoredResponses int
	// Tools, when not nil, is told the tools each rewritten request declared, kept and removed (the admin
	// API's list of tools seen).
	Tools ToolWatcher
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Tracing, when not nil, records a server span per /v1/ request and a span per stage, and sends
	// promptgate's traceparent upstream; nil turns tracing off (the client's traceparent passes unchanged).
	Tracing *tracing.Tracing
	Log     *slog.Logger
}

// ToolWatcher is told, for every rewritten request, which declared tools were kept and which removed. It
// must be quick and safe for concurrent use (proxy/toolseen implements it).
type ToolWatcher interface {
	Saw(protocol string, kept []policy.Tool, removed []policy.Removal)
}

// Server is the proxy listener's handler.
type Server struct {
	opt         Options
	log         *slog.Logger
	rewritten   *httputil.ReverseProxy
	passthrough *httputil.ReverseProxy
	mux         *http.ServeMux
	// blocked remembers the calls blocked in Responses answers, and the policy of background responses
	// (see stored.go).
	blocked *blockedMemory
	// schemas keeps the compiled tool schemas that clients declare, shared by every response's checker.
	schemas *vet.SchemaCache
}

// exchange is the state of one rewritten request, carried in its context to the reverse proxy hooks.
type exchange struct {
	id    string
	route *route
	prep  *Prepared
	log   *slog.Logger
	sent  time.Time // when the request went upstream
	// resp tracks the response id and blocked calls of a /v1/responses exchange; nil on other routes.
	resp  *respTrack
	trace exchangeTrace
}

type exchangeKey struct{}

// New builds the handler.
func New(o Options) (*Server, error) {
	if o.Engine == nil || o.Upstream == nil {
		return nil, errors.New("proxy: engine and upstream are required")
	}
	if o.AnthropicUpstream == nil {
		u, err := url.Parse(DefaultAnthropicUpstream)
		if err != nil {
			return nil, fmt.Errorf("proxy: default anthropic upstream: %w", err)
		}
		o.AnthropicUpstream = u
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
	s := &Server{opt: o, log: o.Log, blocked: newBlockedMemory(o.StoredResponses), schemas: vet.NewSchemaCache(vet.DefaultSchemaCacheSize)}
	tr := timeoutTransport{next: o.Transport, timeout: o.Engine.Limits.UpstreamTimeout}
	buffers := newBufferPool()
	s.rewritten = &httputil.ReverseProxy{
		Rewrite:        s.rewriteRequest,
		Transport:      tr,
		FlushInterval:  -1,
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
	for _, rt := range routes {
		mux.HandleFunc("POST "+rt.path, func(w http.ResponseWriter, r *http.Request) { s.rewrite(w, r, rt) })
	}
	mux.HandleFunc("/v1/", s.pass)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no route for %s %s on the proxy listener", r.Method, r.URL.Path)})
	})
	s.mux = mux
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := requestID(r)
	w.Header().Set(HeaderRequestID, id)
	sw := &statusWriter{ResponseWriter: w}
	ctx, span := s.startRequestSpan(r, id)
	s.mux.ServeHTTP(sw, r.WithContext(context.WithValue(ctx, requestIDKey{}, id)))
	endRequestSpan(span, sw.status, w.Header())
	if s.opt.Metrics != nil {
		route := "passthrough"
		if rt := routeOf(r); rt != nil {
			route = rt.name
		} else if !strings.HasPrefix(r.URL.Path, "/v1/") {
			route = "other"
		}
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		s.opt.Metrics.Request(w.Header().Get(HeaderProtocol), route, status)
	}
}

// statusWriter remembers the status code; Unwrap lets http.ResponseController reach Flush.
type statusWriter struct {
	http.ResponseWriter
	status int
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
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type requestIDKey struct{}

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

// route is one rewritten endpoint: the engine's surface, the upstream it goes to, and the vetting of its
// response. The pipeline around it is the same for every route.
type route struct {
	path string
	name string // metrics label and log tag
	// prepare is the Engine's method for the surface.
	prepare func(e *Engine, ctx context.Context, in Input) (*Prepared, error)
	// anthropic routes go to Options.AnthropicUpstream with Anthropic's credentials.
	anthropic bool
	// body vets a non-stream response: the edited body, the number of blocked calls, and in error mode the
	// call that makes the answer a 403.
	body func(body []byte, c *vet.Checker, rec func(vet.Decision)) ([]byte, int, *vet.Decision, error)
	// stream vets a streamed response.
	stream func(up io.ReadCloser, c *vet.Checker, rec func(vet.Decision), x *exchange) io.ReadCloser
}

// routes are the rewritten endpoints.
var routes = []*route{
	{
		path: PathChat, name: "chat", prepare: (*Engine).PrepareChat,
		body: func(b []byte, c *vet.Checker, rec func(vet.Decision)) ([]byte, int, *vet.Decision, error) {
			out, res, err := chatvet.Body(b, c, rec)
			return out, res.Blocked, res.ErrorCall, err
		},
		stream: func(up io.ReadCloser, c *vet.Checker, rec func(vet.Decision), x *exchange) io.ReadCloser {
			return chatvet.NewStream(up, c, rec)
		},
	},
	{
		path: PathResponses, name: "responses", prepare: (*Engine).PrepareResponses,
		body: func(b []byte, c *vet.Checker, rec func(vet.Decision)) ([]byte, int, *vet.Decision, error) {
			out, res, err := respvet.Body(b, c, rec)
			return out, res.Blocked, res.ErrorCall, err
		},
		stream: func(up io.ReadCloser, c *vet.Checker, rec func(vet.Decision), x *exchange) io.ReadCloser {
			s := respvet.NewStream(up, c, rec)
			if x.resp != nil {
				s.OnResponseID = x.resp.setID
			}
			return s
		},
	},
	{
		path: PathMessages, name: "messages", prepare: (*Engine).PrepareMessages, anthropic: true,
		body: func(b []byte, c *vet.Checker, rec func(vet.Decision)) ([]byte, int, *vet.Decision, error) {
			out, res, err := anthvet.Body(b, c, rec)
			return out, res.Blocked, res.ErrorCall, err
		},
		stream: func(up io.ReadCloser, c *vet.Checker, rec func(vet.Decision), x *exchange) io.ReadCloser {
			return anthvet.NewStream(up, c, rec)
		},
	},
}

// routeOf is the rewritten route of a request, or nil.
func routeOf(r *http.Request) *route {
	if r.Method != http.MethodPost {
		return nil
	}
	for _, rt := range routes {
		if r.URL.Path == rt.path {
			return rt
		}
	}
	return nil
}

// isAnthropicPath reports the paths that belong to the Anthropic upstream: /v1/messages and below it.
func isAnthropicPath(p string) bool {
	return p == PathMessages || strings.HasPrefix(p, PathMessages+"/")
}

// rewrite runs the pipeline for a rewritten route and forwards the result.
func (s *Server) rewrite(w http.ResponseWriter, r *http.Request, rt *route) {
	start := time.Now()
	id, _ := r.Context().Value(requestIDKey{}).(string)
	log := requestLogger(s.log, id)
	body, err := readBody(w, r, s.opt.Engine.Limits.MaxBodyBytes)
	if err != nil {
		fail(w, log, err)
		return
	}
	prep, err := rt.prepare(s.opt.Engine, r.Context(), Input{Path: r.URL.Path, Header: r.Header, Body: body})
	if err != nil {
		var re *refusedError
		if errors.As(err, &re) {
			s.opt.Audit.Record(r.Context(), audit.Event{
				Time: time.Now().UTC(), RequestID: id, Kind: re.kind,
				Protocol: re.protocol.ID, ProtocolVersion: re.protocol.Version,
				Tool: re.tool, Verdict: audit.VerdictBlocked, Reason: re.reason,
			})
		}
		fail(w, log, err)
		return
	}
	if s.opt.Tools != nil {
		s.opt.Tools.Saw(prep.Protocol.ID, prep.Kept, prep.Removed)
	}
	h := w.Header()
	h.Set(HeaderProtocol, prep.Protocol.ID)
	h.Set(HeaderTemplate, prep.Template.Name+"@"+strconv.Itoa(prep.Template.Version))
	if len(prep.Removed) > 0 {
		names := make([]string, len(prep.Removed))
		for i, rm := range prep.Removed {
			names[i] = rm.Name
			s.opt.Audit.Record(r.Context(), audit.Event{
				Time: time.Now().UTC(), RequestID: id, Kind: audit.KindToolRemoved,
				Protocol: prep.Protocol.ID, ProtocolVersion: prep.Protocol.Version,
				Tool: rm.Name, Verdict: audit.VerdictRemoved, Reason: rm.Reason,
			})
		}
		h.Set(HeaderToolsRemoved, strings.Join(names, ","))
	}
	if prep.StoredPrompt != "" {
		reason := fmt.Sprintf("stored prompt %q forwarded: its tools and instructions are applied upstream, unseen; protocol %q allows every tool", prep.StoredPrompt, prep.Protocol.ID)
		s.opt.Audit.Record(r.Context(), audit.Event{
			Time: time.Now().UTC(), RequestID: id, Kind: audit.KindStoredPrompt,
			Protocol: prep.Protocol.ID, ProtocolVersion: prep.Protocol.Version,
			Tool: "prompt", Verdict: audit.VerdictAllowed, Reason: reason,
		})
		log.Info("stored prompt forwarded ungoverned", "prompt_id", prep.StoredPrompt, "protocol", prep.Protocol.ID)
	}
	if prep.Prompt.ContextTruncated {
		s.opt.Metrics.ContextTruncated()
	}
	s.opt.Metrics.Overhead(rt.name, time.Since(start))
	log.Debug("forwarding", "route", rt.name, "protocol", prep.Protocol.ID, "template", prep.Template.Name, "stream", prep.Stream, "tools_kept", len(prep.Kept), "tools_removed", len(prep.Removed))
	x := &exchange{id: id, route: rt, prep: prep, log: log}
	if rt.path == PathResponses {
		x.resp = &respTrack{mem: s.blocked}
		if isBackground(prep.Body) {
			x.resp.bg = newBgPolicy(s.policy(x), prep.Protocol.ID, prep.Protocol.Version)
		}
		if prev := gjson.GetBytes(body, "previous_response_id"); prev.Type == gjson.String {
			if calls := s.blocked.lookup(prev.Str); len(calls) > 0 {
				out, n, err := answerBlocked(prep.Body, calls)
				if err != nil {
					fail(w, log, err)
					return
				}
				if n > 0 {
					log.Info("answered blocked calls of the previous response", "previous_response_id", prev.Str, "calls", n)
				}
				prep.Body = out
			}
		}
	}
	ctx := context.WithValue(r.Context(), exchangeKey{}, x)
	s.rewritten.ServeHTTP(w, r.WithContext(ctx))
}

// pass forwards every other /v1/* request unchanged.
func (s *Server) pass(w http.ResponseWriter, r *http.Request) {
	if p := disguisedRoute(r); p != "" {
		writeError(w, apiError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no route for %s %s on the proxy listener: it spells %s, which is only served as POST %s", r.Method, r.URL.EscapedPath(), p, p)})
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		// The request body streams to the upstream while its answer streams back. Without full duplex,
		// net/http closes the body once the answer's headers go out, and the transport's last read of it
		// (looking for its end) then fails, which makes the transport drop the upstream connection in the
		// middle of the answer. HTTP/2 is always full duplex (the error is ignored there).
		_ = http.NewResponseController(w).EnableFullDuplex()
	}
	s.passthrough.ServeHTTP(w, r)
}

// upstreamURL maps /v1/X to <upstream>/X.
func upstreamURL(base *url.URL, in *url.URL) *url.URL {
	u := *base
	rest := strings.TrimPrefix(in.Path, "/v1")
	u.Path = strings.TrimRight(base.Path, "/") + rest
	u.RawPath = ""
	if in.RawPath != "" {
		u.RawPath = strings.TrimRight(base.EscapedPath(), "/") + strings.TrimPrefix(in.RawPath, "/v1")
	}
	u.RawQuery = in.RawQuery
	return &u
}

// outboundHeaders removes promptgate's own headers and applies the upstream's key: the OpenAI-compatible
// upstream's as Authorization, the Anthropic upstream's as x-api-key.
func (s *Server) outboundHeaders(h http.Header, anthropic bool) {
	for k := range h {
		if strings.HasPrefix(k, "X-Promptgate-") {
			delete(h, k)
		}
	}
	switch {
	case anthropic && s.opt.AnthropicAPIKey != "":
		h.Del("Authorization")
		h.Set("X-Api-Key", s.opt.AnthropicAPIKey)
	case !anthropic && s.opt.UpstreamAPIKey != "":
		h.Set("Authorization", "Bearer "+s.opt.UpstreamAPIKey)
	}
}

// target is the upstream base URL of a request path.
func (s *Server) target(path string) (*url.URL, bool) {
	if isAnthropicPath(path) {
		return s.opt.AnthropicUpstream, true
	}
	return s.opt.Upstream, false
}

func (s *Server) rewriteRequest(pr *httputil.ProxyRequest) {
	x, _ := pr.In.Context().Value(exchangeKey{}).(*exchange)
	base, anthropic := s.opt.Upstream, x.route.anthropic
	if anthropic {
		base = s.opt.AnthropicUpstream
	}
	pr.Out.URL = upstreamURL(base, pr.In.URL)
	pr.Out.Host = ""
	s.outboundHeaders(pr.Out.Header, anthropic)
	// The response is parsed to vet it: let the transport negotiate and decode compression itself.
	pr.Out.Header.Del("Accept-Encoding")
	pr.Out.Body = io.NopCloser(bytes.NewReader(x.prep.Body))
	pr.Out.ContentLength = int64(len(x.prep.Body))
	pr.Out.Header.Set("Content-Length", strconv.Itoa(len(x.prep.Body)))
	pr.Out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(x.prep.Body)), nil }
	s.traceUpstream(pr, x)
	x.sent = time.Now()
}

func (s *Server) rewritePassthrough(pr *httputil.ProxyRequest) {
	base, anthropic := s.target(pr.In.URL.Path)
	pr.Out.URL = upstreamURL(base, pr.In.URL)
	pr.Out.Host = ""
	s.outboundHeaders(pr.Out.Header, anthropic)
	if storedResponseID(pr.In) != "" {
		// A stored response may need calls removed: let the transport decode compression.
		pr.Out.Header.Del("Accept-Encoding")
	}
	s.injectTrace(pr)
}

// upstreamHeaders keeps the upstream's request id under another name and drops headers that only
// promptgate may set.
func upstreamHeaders(h http.Header) {
	if v := h.Get(HeaderRequestID); v != "" {
		h.Set(HeaderUpstreamReqID, v)
		h.Del(HeaderRequestID)
	}
	dropOwnHeaders(h)
}

// dropOwnHeaders deletes the X-Promptgate-* fields of h, also spelt with underscores (gateways and CGI-style
// readers fold "_" and "-" together).
func dropOwnHeaders(h http.Header) {
	for k := range h {
		if len(k) >= len("X-Promptgate-") && strings.EqualFold(strings.ReplaceAll(k[:len("X-Promptgate-")], "_", "-"), "X-Promptgate-") {
			delete(h, k)
		}
	}
}

// guardTrailers keeps the upstream from sending promptgate's headers as trailers: they are dropped from the
// announced trailers now and, since the transport fills trailers in only when the body ends, again then.
func guardTrailers(resp *http.Response) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return // an upgraded connection has no trailers, and its body must stay writable
	}
	dropOwnHeaders(resp.Trailer)
	resp.Body = &trailerGuard{ReadCloser: resp.Body, resp: resp}
}

// trailerGuard is a response body that drops promptgate's headers from the trailers once it ends.
type trailerGuard struct {
	io.ReadCloser
	resp *http.Response
}

func (g *trailerGuard) Read(p []byte) (int, error) {
	n, err := g.ReadCloser.Read(p)
	if err != nil {
		dropOwnHeaders(g.resp.Trailer)
	}
	return n, err
}

func (s *Server) passResponse(resp *http.Response) error {
	upstreamHeaders(resp.Header)
	guardTrailers(resp)
	if id := storedResponseID(resp.Request); id != "" {
		if bg := s.blocked.background(id); bg != nil {
			return s.vetStored(resp, id, bg)
		}
		return s.stripStored(resp, id)
	}
	return nil
}

// vetResponse checks every tool call of a rewritten request's response before any byte of it is sent.
func (s *Server) vetResponse(resp *http.Response) error {
	upstreamHeaders(resp.Header)
	guardTrailers(resp)
	x, _ := resp.Request.Context().Value(exchangeKey{}).(*exchange)
	if x == nil {
		return errors.New("proxy: response without its exchange")
	}
	s.opt.Metrics.Upstream(x.route.name, time.Since(x.sent))
	x.trace.upstreamDone(resp.StatusCode)
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode >= 400 {
		return checkErrorBody(resp, ct)
	}
	if err := plainBody(resp); err != nil {
		return err
	}
	checker := s.checker(x)
	rec := x.trace.count(s.recorder(resp.Request.Context(), x))
	if ct == "text/event-stream" {
		streamBody(resp, x.trace.relay(resp.Request.Context(), &loggedStream{ReadCloser: x.route.stream(resp.Body, checker, rec, x), log: x.log}))
		return nil
	}
	body, err := readUpstream(resp)
	if err != nil {
		return err
	}
	if x.resp != nil {
		id := gjson.GetBytes(body, "id")
		if x.resp.bg != nil && (id.Type != gjson.String || id.Str == "") {
			// Its retrievals could not be tied to the policy that must vet them.
			return fmt.Errorf("%w: the background response has no id", errUpstreamMalformed)
		}
		if id.Type == gjson.String {
			x.resp.setID(id.Str)
		}
	}
	_, vsp := tracing.Stage(resp.Request.Context(), tracing.SpanVet)
	out, blocked, errorCall, err := x.route.body(body, checker, rec)
	x.trace.vetDone(vsp, err)
	if err != nil {
		return fmt.Errorf("%w: %v", errUpstreamMalformed, err)
	}
	if errorCall != nil {
		out = chatvet.BlockedErrorJSON(*errorCall)
		resp.StatusCode, resp.Status = http.StatusForbidden, fmt.Sprintf("%d %s", http.StatusForbidden, http.StatusText(http.StatusForbidden))
		resp.Header.Set("Content-Type", "application/json")
	}
	if blocked > 0 {
		resp.Header.Set(HeaderBlocked, strconv.Itoa(blocked))
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	return nil
}

// plainBody refuses a success answer in a content coding: the transport asks for gzip and decodes it itself, so
// any coding left (br, deflate, zstd, "gzip, br" ...) was not asked for, and its bytes cannot be vetted — the
// client would decode them into something the relay never read.
func plainBody(resp *http.Response) error {
	for _, v := range resp.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				resp.Body.Close()
				return fmt.Errorf("%w: a body in content coding %q, which was not asked for", errUpstreamMalformed, v)
			}
		}
	}
	resp.Header.Del("Content-Encoding")
	return nil
}

// checker builds the per-request tool-call checker from the prepared request.
func (s *Server) checker(x *exchange) *vet.Checker {
	if x.resp != nil && x.resp.bg != nil {
		return vet.NewChecker(x.resp.bg.policy)
	}
	return vet.NewChecker(s.policy(x))
}

// policy is the tool-call policy of the prepared request.
func (s *Server) policy(x *exchange) vet.Policy {
	p := x.prep
	allowed := make(map[string]bool, len(p.Kept))
	schemas := make(map[string][]byte, len(p.Kept))
	for _, t := range p.Kept {
		if t.UpstreamOnly {
			continue // the upstream runs it: a call of that name is a call of an undeclared tool
		}
		allowed[t.Name] = true
		if len(t.Schema) > 0 {
			schemas[t.Name] = t.Schema
		}
	}
	rules, err := p.argRules()
	if err != nil {
		// Validated when the protocol was stored; if it still fails, no call may pass.
		x.log.Error("argument rules do not compile; every tool call is refused", "protocol", p.Protocol.ID, "err", err)
		allowed = map[string]bool{}
	}
	return vet.Policy{
		Allowed: allowed, Schemas: schemas, Rules: rules,
		Mode: p.Protocol.OnViolation, Atomic: p.Protocol.Atomic, MaxDepth: s.opt.Engine.Limits.MaxJSONDepth,
		SchemaCache: s.schemas,
	}
}

func (s *Server) recorder(ctx context.Context, x *exchange) func(vet.Decision) {
	return func(d vet.Decision) {
		if x.resp != nil {
			x.resp.decision(d)
		}
		s.opt.Audit.Record(ctx, audit.Event{
			Time: time.Now().UTC(), RequestID: x.id, Kind: audit.KindToolCall,
			Protocol: x.prep.Protocol.ID, ProtocolVersion: x.prep.Protocol.Version,
			Tool: d.Tool, Verdict: string(d.Verdict), Reason: d.Reason, Rule: d.Rule,
		}.WithArguments(d.Args, s.opt.AuditArguments))
	}
}

// checkErrorBody passes an upstream error with a JSON body through; any other error body is malformed.
func checkErrorBody(resp *http.Response, ct string) error {
	body, err := readUpstream(resp)
	if err != nil {
		return err
	}
	if !gjson.ValidBytes(body) {
		return fmt.Errorf("%w: status %d with a non-JSON body (%s)", errUpstreamMalformed, resp.StatusCode, ct)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

func readUpstream(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxUpstreamBody+1))
	if err != nil {
		if errors.Is(err, errUpstreamTimeout) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: reading body: %v", errUpstreamMalformed, err)
	}
	if len(body) > maxUpstreamBody {
		return nil, fmt.Errorf("%w: body larger than %d bytes", errUpstreamMalformed, maxUpstreamBody)
	}
	return body, nil
}

// upstreamFailed answers when the upstream could not be reached, timed out, or answered malformed.
func (s *Server) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	traceUpstreamFailed(r, err)
	log := s.log
	if id, ok := r.Context().Value(requestIDKey{}).(string); ok {
		log = log.With("request_id", id)
	}
	if r.Context().Err() != nil {
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

// readBody reads the whole request body under the size cap.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	// Room for the announced body and the bytes.MinRead that ReadFrom wants free before each read, so
	// that the body lands in one allocation, without a copy.
	size := 4096
	if r.ContentLength > 0 {
		size = int(r.ContentLength) + bytes.MinRead
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	if _, err := buf.ReadFrom(rd); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
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

// requestID takes a well-formed client X-Request-Id, else makes one.
func requestID(r *http.Request) string {
	if v := r.Header.Get(HeaderRequestID); v != "" && len(v) <= 128 && strings.Trim(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:") == "" {
		return v
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "pg-" + hex.EncodeToString(b[:])
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
// upstream_stream_truncated then, and the operator should see the cause.
type loggedStream struct {
	io.ReadCloser
	log *slog.Logger
}

func (l *loggedStream) Close() error {
	if e, ok := l.ReadCloser.(interface{ Err() error }); ok {
		switch err := e.Err(); {
		case err == nil:
		case errors.Is(err, context.Canceled):
			l.log.Debug("stream ended: the client went away", "err", err)
		default:
			l.log.Warn("upstream stream broke off; the client got upstream_stream_truncated", "err", err)
		}
	}
	return l.ReadCloser.Close()
}

// streamBody makes body, a vetted stream of unknown length, the response's body.
func streamBody(resp *http.Response, body io.ReadCloser) {
	resp.Body = body
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
}
