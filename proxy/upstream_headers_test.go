package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
)

// upstreamOnly reports whether k is a header only promptgate may send a client: X-Promptgate-* or
// Access-Control-*, in any letter case, with "_" for "-".
func upstreamOnly(k string) bool {
	n := strings.ReplaceAll(strings.ToLower(k), "_", "-")
	return strings.HasPrefix(n, "x-promptgate-") || strings.HasPrefix(n, "access-control-")
}

// The headers only promptgate sets never come from the upstream in any part of an answer: not in a
// 1xx informational answer (103 Early Hints) sent before it, and not as trailers, on rewritten and
// passed-through routes. An informational answer does not erase promptgate's own headers from the
// final one either (the reverse proxy clears the header map after relaying one), nor is its status
// the one recorded.
func TestUpstreamHeadersNotRelayedInInformationalOrTrailers(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("X-Promptgate-Blocked", "0")
		h.Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		clear(h)
		h.Set("Content-Type", "application/json")
		h.Set("Trailer", "Access-Control-Allow-Origin, Access_Control_Allow_Credentials")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, completionJSON)
		w.(http.Flusher).Flush()
		h.Set("Access-Control-Allow-Origin", "https://evil.example")
		h.Set("Access_Control_Allow_Credentials", "true")
		h.Set(http.TrailerPrefix+"Access-Control-Expose-Headers", "*")
	})
	pol, err := guard.New(guard.Config{AllowedOrigins: []string{"https://app.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(nil)
	ts, _ := guardedProxyWith(t, up.URL, Options{Guard: pol, Metrics: m})
	for _, rq := range []struct{ method, path, body string }{{"POST", PathChat, chatBody}, {"GET", "/v1/models", ""}} {
		var mu sync.Mutex
		var informational []textproto.MIMEHeader
		trace := &httptrace.ClientTrace{Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
			mu.Lock()
			defer mu.Unlock()
			informational = append(informational, h)
			return nil
		}}
		var body io.Reader
		if rq.body != "" {
			body = strings.NewReader(rq.body)
		}
		req, err := http.NewRequest(rq.method, ts.URL+rq.path, body)
		if err != nil {
			t.Fatal(err)
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "https://app.example.com")
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		for _, h := range informational {
			for k := range h {
				if upstreamOnly(k) {
					t.Errorf("%s %s: the upstream's %s reached the client in a 1xx answer: %v", rq.method, rq.path, k, h)
				}
			}
		}
		mu.Unlock()
		for k, v := range resp.Trailer {
			if upstreamOnly(k) {
				t.Errorf("%s %s: the upstream's %s reached the client as a trailer: %v", rq.method, rq.path, k, v)
			}
		}
		if resp.Header.Get(HeaderRequestID) == "" || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
			t.Errorf("%s %s: promptgate's own headers are missing from the answer: %v", rq.method, rq.path, resp.Header)
		}
		if rq.path == PathChat && resp.Header.Get(HeaderProtocol) == "" {
			t.Errorf("%s %s: no %s in the answer: %v", rq.method, rq.path, HeaderProtocol, resp.Header)
		}
	}
	if out := scrape(t, m); strings.Contains(out, `status="103"`) {
		t.Errorf("a 1xx answer was recorded as the request's status: %s", grepMetric(out, "promptgate_requests_total"))
	}
}

// guardedProxyWith serves promptgate in front of up with o (its Engine and upstreams filled in).
func guardedProxyWith(t *testing.T, up string, o Options) (*httptest.Server, *Server) {
	t.Helper()
	u, _ := url.Parse(up + "/v1")
	o.Engine, o.Upstreams = testEngine(t, "", nil, nil, nil), map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: u}}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, s
}

// scrape is the text of m's metrics.
func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}
