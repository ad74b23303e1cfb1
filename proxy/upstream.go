package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
	"github.com/promptgate/promptgate/proxy/telemetry/redact"
)

// NewTransport is the HTTP transport to the upstream: its own, never the global one. It never asks
// for a compressed answer itself: the answers the proxy reads to vet them then cost what the
// upstream sent (a gzip answer decodes to a thousand times its size), and one compressed anyway is
// refused (plainBody). A passed-through request keeps the client's own Accept-Encoding, and its
// answer is relayed as it comes.
func NewTransport() *http.Transport {
	return &http.Transport{
		DisableCompression:    true,
		Proxy:                 nil, // the upstream is reached directly; HTTPS_PROXY is for clients of promptgate
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// A rewritten request body (an 8 KB chat is common, a 40 KB context too) goes out in one
		// write.
		WriteBufferSize: 64 << 10,
	}
}

// timeoutTransport bounds the wait for response headers and every silent gap of the response body.
type timeoutTransport struct {
	next    http.RoundTripper
	timeout time.Duration
}

func (t timeoutTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	dropInformational(req)
	if t.timeout <= 0 {
		return t.next.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timer := time.AfterFunc(t.timeout, func() { cancel(surface.ErrUpstreamTimeout) })
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		timer.Stop()
		if context.Cause(ctx) == surface.ErrUpstreamTimeout {
			err = surface.ErrUpstreamTimeout
		}
		cancel(nil)
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// An upgraded connection (the Realtime API's WebSocket) is a tunnel that may stay quiet for
		// long: no idle timeout, and its body must stay the transport's writable one.
		timer.Stop()
		return resp, nil
	}
	timer.Reset(t.timeout)
	resp.Body = &idleBody{body: resp.Body, timer: timer, timeout: t.timeout, ctx: ctx, cancel: cancel}
	return resp, nil
}

// dropInformational keeps the upstream's 1xx informational answers (103 Early Hints) from the
// client: the reverse proxy relays one through the hook it puts in the request's trace, with the
// upstream's headers unfiltered (Access-Control-*, X-Promptgate-*), and then clears the header map
// of the client's answer, promptgate's own headers included. Only the final answer is relayed; 100
// Continue and 101 are not informational answers to the hook.
func dropInformational(req *http.Request) {
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil {
		tr.Got1xxResponse = nil
	}
}

// idleBody restarts the silence timer on every read; when it fires, reads fail with
// surface.ErrUpstreamTimeout.
type idleBody struct {
	body    io.ReadCloser
	timer   *time.Timer
	timeout time.Duration
	ctx     context.Context
	cancel  context.CancelCauseFunc
	once    sync.Once
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if n > 0 {
		b.timer.Reset(b.timeout)
	}
	if err != nil && err != io.EOF && context.Cause(b.ctx) == surface.ErrUpstreamTimeout {
		err = surface.ErrUpstreamTimeout
	}
	return n, err
}

// finishBytes and finishWait bound Finish: an upstream that goes on sending after its stream's last
// event, or is slow to end its body, loses its connection rather than delay the client's answer for
// longer.
const (
	finishBytes = 64 << 10
	finishWait  = 50 * time.Millisecond
)

// Finish reads the rest of the body, at most finishBytes and for at most finishWait or the upstream
// timeout, whichever is shorter (the silence timer is set to it and cuts the read off), so that a
// stream ended by its last event still gives its connection back to the transport: a body closed
// before its end takes its connection with it, and the next request dials anew.
func (b *idleBody) Finish() {
	if b.ctx.Err() != nil {
		return
	}
	b.timer.Reset(min(finishWait, b.timeout))
	_, _ = io.CopyN(io.Discard, b.body, finishBytes)
}

func (b *idleBody) Close() error {
	err := b.body.Close()
	b.once.Do(func() {
		b.timer.Stop()
		b.cancel(nil)
	})
	return err
}

// reverseProxies are the listener's two ways upstream, through the upstream transport and the copy
// buffers: a rewritten request's, whose answer goes through the response side (respond), and a
// passed-through one's.
func (s *Server) reverseProxies() (rewritten, passthrough *httputil.ReverseProxy) {
	errorLog := slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	rewritten = &httputil.ReverseProxy{
		Rewrite:   s.rewriteRequest,
		Transport: s.upstream,
		// 0, not -1: net/http still flushes every write of a stream (text/event-stream, or a body
		// of unknown length); a vetted body of known length goes out in one write when the handler
		// returns, with no flush of its own.
		FlushInterval:  0,
		BufferPool:     s.buffers,
		ModifyResponse: s.respond,
		ErrorHandler:   s.upstreamFailed,
		ErrorLog:       errorLog,
	}
	passthrough = &httputil.ReverseProxy{
		Rewrite:        s.rewritePassthrough,
		Transport:      s.upstream,
		FlushInterval:  -1,
		BufferPool:     s.buffers,
		ModifyResponse: s.passResponse,
		ErrorHandler:   s.upstreamFailed,
		ErrorLog:       errorLog,
	}
	return rewritten, passthrough
}

// pass forwards a request of an upstream's paths (every other /v1/*, /v1beta/* request) to it
// unchanged.
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
		// The request body streams to the upstream while its answer streams back. Without full
		// duplex, net/http closes the body once the answer's headers go out, and the transport's
		// last read of it (looking for its end) then fails, which makes the transport drop the
		// upstream connection in the middle of the answer. HTTP/2 is always full duplex (the error
		// is ignored there).
		_ = http.NewResponseController(w).EnableFullDuplex()
		// The transport may still read the body after the answer, or never: it ends here.
		defer doneBody(r.Body)
	}
	s.passthrough.ServeHTTP(w, r)
}

// outboundHeaders removes promptgate's own headers and applies the upstream's operator key where
// the request's URL, as it goes out, has that key's origin, as the upstream's Auth says (the
// client's credentials it replaces removed). Anywhere else the client's credentials pass unchanged.
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
		// The answer is edited: it is asked for uncompressed (NewTransport), and read as the
		// upstream sent it.
		pr.Out.Header.Del("Accept-Encoding")
		in := inflightOf(pr.In.Context())
		in.pt, in.in = pt, pr.In
	}
	s.injectTrace(pr)
}

// guardHeaders masks the operator keys an answer echoes and drops from its headers and trailers
// what only promptgate may set: the first thing done with every answer from upstream, passed
// through or not.
func (s *Server) guardHeaders(resp *http.Response) {
	s.maskKeys(resp)
	upstreamHeaders(resp.Header)
	guardTrailers(resp, s.buffers)
}

// upstreamHeaders keeps the upstream's request id under another name and drops headers that only
// promptgate may set: its own, and the CORS headers (the listener alone decides which pages may
// read it).
func upstreamHeaders(h http.Header) {
	if vs := h[HeaderRequestID]; len(vs) > 0 && vs[0] != "" {
		h[HeaderUpstreamReqID] = vs[:1:1] // h.Set(HeaderUpstreamReqID, h.Get(HeaderRequestID)), its slice reused
		delete(h, HeaderRequestID)
	}
	dropOwnHeaders(h)
	guard.DropCORS(h)
}

// dropOwnHeaders deletes the X-Promptgate-* fields of h in any letter case, also spelt with
// underscores (gateways and CGI-style readers fold "_" and "-" together): a client's going
// upstream, an upstream's coming back.
func dropOwnHeaders(h http.Header) {
	for k := range h {
		if len(k) >= len("X-Promptgate-") && strings.EqualFold(strings.ReplaceAll(k[:len("X-Promptgate-")], "_", "-"), "X-Promptgate-") {
			delete(h, k)
		}
	}
}

// guardTrailers keeps the upstream from sending as trailers the headers only promptgate may set
// (its own, the CORS headers): they are dropped from the announced trailers now and, since the
// transport fills trailers in only when the body ends, again then.
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

// trailerGuard is a response body that drops the fields only promptgate may set from the trailers
// once it ends.
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

// Finish finishes the guarded body (relay.Finisher), with the trailers that come at its end guarded
// too.
func (g *trailerGuard) Finish() {
	if f, ok := g.ReadCloser.(relay.Finisher); ok {
		f.Finish()
		dropTrailers(g.resp.Trailer)
	}
}

// passResponse is the response side of a passed-through request (the passthrough proxy's
// ModifyResponse): its headers and trailers guarded, and the answer edited where a surface must see
// it.
func (s *Server) passResponse(resp *http.Response) error {
	s.guardHeaders(resp)
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

// bufferPool lends the reverse proxies their 32 KiB copy buffers (httputil.BufferPool), instead of
// one new buffer per response.
type bufferPool struct{ p sync.Pool }

const proxyBufferSize = 32 << 10

// The pool holds pointers to the buffers' arrays: a slice's own pointer would be one allocation per
// Put.
func newBufferPool() *bufferPool {
	return &bufferPool{p: sync.Pool{New: func() any { return new([proxyBufferSize]byte) }}}
}

func (b *bufferPool) Get() []byte { return b.p.Get().(*[proxyBufferSize]byte)[:] }

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) != proxyBufferSize {
		return
	}
	b.p.Put((*[proxyBufferSize]byte)(buf[:proxyBufferSize]))
}
