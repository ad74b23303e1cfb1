package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/promptgate/promptgate/proxy/surface"
)

// NewTransport is the HTTP transport to the upstream: its own, never the global one. It never asks for a
// compressed answer itself: the answers the proxy reads to vet them then cost what the upstream sent (a gzip
// answer decodes to a thousand times its size), and one compressed anyway is refused (plainBody). A
// passed-through request keeps the client's own Accept-Encoding, and its answer is relayed as it comes.
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
		// A rewritten request body (an 8 KB chat is common, a 40 KB context too) goes out in one write.
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
		// An upgraded connection (the Realtime API's WebSocket) is a tunnel that may stay quiet for long:
		// no idle timeout, and its body must stay the transport's writable one.
		timer.Stop()
		return resp, nil
	}
	timer.Reset(t.timeout)
	resp.Body = &idleBody{body: resp.Body, timer: timer, timeout: t.timeout, ctx: ctx, cancel: cancel}
	return resp, nil
}

// dropInformational keeps the upstream's 1xx informational answers (103 Early Hints) from the client: the
// reverse proxy relays one through the hook it puts in the request's trace, with the upstream's headers
// unfiltered (Access-Control-*, X-Promptgate-*), and then clears the header map of the client's answer,
// promptgate's own headers included. Only the final answer is relayed; 100 Continue and 101 are not
// informational answers to the hook.
func dropInformational(req *http.Request) {
	if tr := httptrace.ContextClientTrace(req.Context()); tr != nil {
		tr.Got1xxResponse = nil
	}
}

// idleBody restarts the silence timer on every read; when it fires, reads fail with surface.ErrUpstreamTimeout.
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

// finishBytes and finishWait bound Finish: an upstream that goes on sending after its stream's last event, or
// is slow to end its body, loses its connection rather than delay the client's answer for longer.
const (
	finishBytes = 64 << 10
	finishWait  = 50 * time.Millisecond
)

// Finish reads the rest of the body, at most finishBytes and for at most finishWait or the upstream timeout,
// whichever is shorter (the silence timer is set to it and cuts the read off), so that a stream ended by its
// last event still gives its connection back to the transport: a body closed before its end takes its
// connection with it, and the next request dials anew.
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
