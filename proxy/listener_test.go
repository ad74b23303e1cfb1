package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
)

// guardedProxy serves promptgate in front of up with the given config and listener policy.
func guardedProxy(t *testing.T, up, cfgYAML string, g guard.Config) (*httptest.Server, *Server) {
	t.Helper()
	pol, err := guard.New(g)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(up + "/v1")
	s, err := New(Options{Engine: testEngine(t, cfgYAML, nil, nil, nil), Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: u}}, Guard: pol})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, s
}

// sendTo sends one request to ts with the given Host (when not empty) and headers, and returns the
// answer.
func sendTo(t *testing.T, ts *httptest.Server, method, path, host, body string, h map[string]string) (*http.Response, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

var jsonType = map[string]string{"Content-Type": "application/json"}

// A DNS-rebound name reaches the listener with a foreign Host: refused before anything goes
// upstream, on rewritten and passed-through paths; a listed name and loopback names are answered,
// and the health checks on any Host (probes use the pod's IP).
func TestListenerRefusesForeignHost(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, okCompletion)
	ts, _ := guardedProxy(t, up.URL, "", guard.Config{Hosts: []string{"gateway.internal", "*.svc.cluster.local"}, Section: "listen"})
	for _, host := range []string{"attacker.example", "attacker.example:8787", "10.1.2.3:8787", "gateway.internal.attacker.example", "svc.cluster.local"} {
		for _, p := range []struct{ method, path, body string }{{"POST", PathChat, chatBody}, {"GET", "/v1/models", ""}, {"POST", PathMessages, `{}`}} {
			resp, b := sendTo(t, ts, p.method, p.path, host, p.body, jsonType)
			assertAPIError(t, resp, b, http.StatusMisdirectedRequest, "host_not_allowed")
			if !strings.Contains(string(b), "listen.hosts") {
				t.Errorf("the refusal does not say how to allow the name: %s", b)
			}
		}
	}
	if up.count() != 0 {
		t.Fatalf("a request with a foreign Host reached the upstream (%d)", up.count())
	}
	for _, host := range []string{"gateway.internal:8787", "pg.team.svc.cluster.local", "localhost:8787", "127.0.0.1", "[::1]:8787"} {
		if resp, b := sendTo(t, ts, "POST", PathChat, host, chatBody, jsonType); resp.StatusCode != http.StatusOK {
			t.Errorf("Host %s: %d %s", host, resp.StatusCode, b)
		}
	}
	for _, p := range []string{PathHealthz, PathReadyz} {
		if resp, b := sendTo(t, ts, "GET", p, "10.1.2.3:8787", "", nil); resp.StatusCode != http.StatusOK {
			t.Errorf("%s on the pod IP: %d %s", p, resp.StatusCode, b)
		}
	}
	// The upstreams' own host names are answered: the HTTPS-proxy door serves an intercepted origin
	// under its name, and no rebinding page controls that name's DNS.
	u, _ := url.Parse("http://api.upstream.test:1/v1")
	a, _ := url.Parse("https://api.anthropic.test/v1")
	s, err := New(Options{Engine: testEngine(t, "", nil, nil, nil), Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: a}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"API.upstream.test", "api.anthropic.test:443", "upstream.test"} {
		req := httptest.NewRequest("POST", "http://127.0.0.1"+PathChat, strings.NewReader("{"))
		req.Host = host
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if want := map[bool]int{true: http.StatusBadRequest, false: http.StatusMisdirectedRequest}[host != "upstream.test"]; w.Code != want {
			t.Errorf("Host %s: %d, want %d: %s", host, w.Code, want, w.Body)
		}
	}
}

// A page of another site cannot use the listener: a foreign Origin, Sec-Fetch-Site cross-site (or
// same-site) and the "simple" content types a page may post anywhere without a preflight are
// refused before anything goes upstream. An SDK's requests (no Origin, JSON or multipart) are
// answered.
func TestListenerRefusesCrossSiteBrowserRequests(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, okCompletion)
	ts, _ := guardedProxy(t, up.URL, "", guard.Config{AllowedOrigins: []string{"https://app.example.com"}, Section: "listen"})
	cases := []struct {
		name   string
		h      map[string]string
		status int
		code   string
	}{
		{"cross-site origin", map[string]string{"Origin": "https://evil.example", "Content-Type": "application/json"}, 403, "origin_not_allowed"},
		{"opaque origin", map[string]string{"Origin": "null", "Content-Type": "application/json"}, 403, "origin_not_allowed"},
		{"cross-site fetch metadata", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, 403, "origin_not_allowed"},
		{"same-site fetch metadata", map[string]string{"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"}, 403, "origin_not_allowed"},
		{"text/plain post", map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, 415, "unsupported_media_type"},
		{"form post", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
	}
	for _, c := range cases {
		for _, path := range []string{PathChat, PathResponses, PathMessages, "/v1/embeddings", "/v1/files"} {
			resp, b := sendTo(t, ts, "POST", path, "", chatBody, c.h)
			if resp.StatusCode != c.status || !strings.Contains(string(b), `"code":"`+c.code+`"`) {
				t.Errorf("%s to %s: %d %s", c.name, path, resp.StatusCode, b)
			}
			if resp.Header.Get("Access-Control-Allow-Origin") != "" {
				t.Errorf("%s: a refusal carries CORS headers", c.name)
			}
		}
	}
	if up.count() != 0 {
		t.Fatalf("a cross-site browser request reached the upstream (%d)", up.count())
	}
	resp, b := sendTo(t, ts, "POST", PathChat, "", chatBody, map[string]string{"Content-Type": "application/json", "Origin": "https://app.example.com", "Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Fatalf("opted-in origin: %d %v %s", resp.StatusCode, resp.Header, b)
	}
}

// OPTIONS is answered by the listener and never forwarded: refused, or a CORS preflight for an
// opted-in origin.
func TestListenerOptionsNeverForwarded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, okCompletion)
	ts, _ := guardedProxy(t, up.URL, "", guard.Config{AllowedOrigins: []string{"https://app.example.com"}})
	for _, path := range []string{PathChat, PathMessages, "/v1/models", "/v1/files/file-1"} {
		resp, b := sendTo(t, ts, "OPTIONS", path, "", "", nil)
		assertAPIError(t, resp, b, http.StatusMethodNotAllowed, "method_not_allowed")
		resp, b = sendTo(t, ts, "OPTIONS", path, "", "", map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
		assertAPIError(t, resp, b, http.StatusForbidden, "origin_not_allowed")
		resp, b = sendTo(t, ts, "OPTIONS", path, "", "", map[string]string{"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"})
		if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
			resp.Header.Get("Access-Control-Allow-Headers") != "authorization, content-type" || len(b) != 0 {
			t.Errorf("preflight of an opted-in origin to %s: %d %v %s", path, resp.StatusCode, resp.Header, b)
		}
	}
	if up.count() != 0 {
		t.Fatalf("OPTIONS reached the upstream (%d)", up.count())
	}
}

// The upstream's Access-Control-* headers never reach the client, on rewritten and passed-through
// routes; an opted-in origin gets promptgate's own.
func TestUpstreamCORSHeadersDropped(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Access-Control-Allow-Credentials", "true")
		h.Set("Access-Control-Expose-Headers", "*")
		h.Set("Access_Control_Allow_Headers", "*")
		if r.URL.Path == "/v1/messages" {
			h.Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`)
			return
		}
		okCompletion(w, r)
	})
	ts, _ := guardedProxy(t, up.URL, "", guard.Config{AllowedOrigins: []string{"https://app.example.com"}})
	reqs := []struct{ method, path, body string }{
		{"POST", PathChat, chatBody},
		{"POST", PathMessages, `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`},
		{"GET", "/v1/models", ""},
		{"POST", "/v1/embeddings", `{"model":"e","input":"hi"}`},
	}
	for _, rq := range reqs {
		resp, b := sendTo(t, ts, rq.method, rq.path, "", rq.body, jsonType)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %d %s", rq.method, rq.path, resp.StatusCode, b)
		}
		for k := range resp.Header {
			if strings.HasPrefix(strings.ToLower(strings.ReplaceAll(k, "_", "-")), "access-control-") {
				t.Errorf("%s %s: upstream header %s reached the client", rq.method, rq.path, k)
			}
		}
		resp, _ = sendTo(t, ts, rq.method, rq.path, "", rq.body, map[string]string{"Content-Type": "application/json", "Origin": "https://app.example.com"})
		if got := resp.Header.Values("Access-Control-Allow-Origin"); len(got) != 1 || got[0] != "https://app.example.com" || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s %s for an opted-in origin: %v", rq.method, rq.path, resp.Header)
		}
	}
}

// A client's X-Promptgate-* headers never go upstream, in any spelling: with "_" for "-" (which Go
// does not canonicalise, and gateways fold) or in lower case (a header map built by hand, as an
// embedder may).
func TestOwnRequestHeadersNotForwardedInAnySpelling(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, okCompletion)
	ts, s := guardedProxy(t, up.URL, "", guard.Config{})
	for _, path := range []string{PathChat, "/v1/embeddings"} {
		_, _ = sendTo(t, ts, "POST", path, "", chatBody, map[string]string{"Content-Type": "application/json", "X-Promptgate_Protocol": "system", "X_PROMPTGATE_USER": "u-1"})
	}
	for _, path := range []string{PathChat, "/v1/embeddings"} {
		req := httptest.NewRequest("POST", "http://127.0.0.1"+path, strings.NewReader(chatBody))
		req.Header = http.Header{"Content-Type": {"application/json"}, "x-promptgate-user": {"u-1"}, "x-promptgate-conversation": {"c-1"}}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("%s in process: %d %s", path, w.Code, w.Body)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.headers) != 4 {
		t.Fatalf("upstream saw %d requests", len(up.headers))
	}
	for i, h := range up.headers {
		for k := range h {
			if strings.HasPrefix(strings.ToLower(strings.ReplaceAll(k, "_", "-")), "x-promptgate-") {
				t.Errorf("request %d: %s went upstream", i, k)
			}
		}
	}
}

// announcedConn signals once the server asks for more bytes than the client sent: the handler is
// then reading the body, its buffer already made.
type announcedConn struct {
	net.Conn
	sent    int
	read    int
	once    sync.Once
	waiting chan<- struct{}
}

func (c *announcedConn) Read(p []byte) (int, error) {
	if c.read >= c.sent {
		c.once.Do(func() { c.waiting <- struct{}{} })
	}
	n, err := c.Conn.Read(p)
	c.read += n
	return n, err
}

type announcedListener struct {
	net.Listener
	sent    int
	waiting chan struct{}
}

func (l *announcedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &announcedConn{Conn: c, sent: l.sent, waiting: l.waiting}, nil
}

// 100 connections each announce a 10 MiB body and send one byte: the heap grows by what was sent
// and a small buffer each, not by what was announced (1 GiB). Not parallel: it measures the heap.
func TestAnnouncedBodyLengthIsNotAllocated(t *testing.T) {
	const conns = 100
	up := newUpstream(t, okCompletion)
	u, _ := url.Parse(up.URL + "/v1")
	s, err := New(Options{Engine: testEngine(t, "", nil, nil, nil), Upstreams: map[string]Upstream{"openai": {URL: u}}})
	if err != nil {
		t.Fatal(err)
	}
	head := "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 10485760\r\n\r\n{"
	ln := &announcedListener{sent: len(head), waiting: make(chan struct{}, conns)}
	ts := httptest.NewUnstartedServer(s)
	ln.Listener = ts.Listener
	ts.Listener = ln
	ts.Start()
	defer ts.Close()

	before := heapNow()
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for range conns {
		c, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
	}
	for i := range conns {
		select {
		case <-ln.waiting:
		case <-time.After(time.Minute):
			t.Fatalf("only %d of %d handlers are reading their body", i, conns)
		}
	}
	after := heapNow()
	grown := int64(after) - int64(before)
	t.Logf("heap in use grew by %d KiB for %d connections", grown>>10, conns)
	if grown > 32<<20 {
		t.Fatalf("heap grew by %d MiB for %d connections that sent one byte of body each", grown>>20, conns)
	}
	if up.count() != 0 {
		t.Fatal("an incomplete body went upstream")
	}
}

// readBody keeps every byte, whatever the announced length says, and holds the cap.
func TestReadBodyGrowsAsBytesArrive(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("x", 3*firstBodyBuffer+17)
	for _, announced := range []int64{-1, int64(len(body))} {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.ContentLength = announced
		got, err := readBody(httptest.NewRecorder(), r, 1<<20)
		if err != nil || string(got) != body {
			t.Fatalf("announced %d: %d bytes, %v", announced, len(got), err)
		}
		if announced > 0 && cap(got) > len(body)+firstBodyBuffer {
			t.Errorf("announced %d: buffer of %d bytes", announced, cap(got))
		}
	}
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	r.ContentLength = -1
	if _, err := readBody(httptest.NewRecorder(), r, int64(len(body)-1)); err == nil {
		t.Fatal("a body over the cap was read")
	}
}

// rawRequest sends head (and no more) on a new connection and returns the answer, read until the
// server closes the connection.
func rawRequest(t *testing.T, ts *httptest.Server, head string) (*http.Response, []byte, error) {
	t.Helper()
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second)) // a guard against a hang, not a measure
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, err = br.ReadByte() // io.EOF once the server closed the connection
	return resp, b, err
}

// A body that does not arrive within limits.bodyReadTimeout is answered 408 and its connection
// closed, on rewritten and passed-through paths; nothing goes upstream.
func TestBodyReadDeadline(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, okCompletion)
	ts, _ := guardedProxy(t, up.URL, "limits: {bodyReadTimeout: 100ms}\n", guard.Config{})
	for _, path := range []string{PathChat, "/v1/files"} {
		head := "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"mo"
		resp, b, err := rawRequest(t, ts, head)
		assertAPIError(t, resp, b, http.StatusRequestTimeout, "request_timeout")
		if err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: the connection was left open: %v", path, err)
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for _, p := range up.paths {
		if p == PathChat {
			t.Error("a rewritten request went upstream without its body")
		}
	}
}

// The body-read deadline is on reading the request only: a stream that lasts longer than it, after
// the body was read, is relayed whole.
func TestBodyReadDeadlineSparesLongStreams(t *testing.T) {
	t.Parallel()
	events := []string{chunk(`{"role":"assistant","content":"a"}`, ""), chunk(`{"content":"b"}`, ""), chunk(`{}`, "stop"), "[DONE]"}
	up := newUpstream(t, sseUpstream(events, 150*time.Millisecond))
	ts, _ := guardedProxy(t, up.URL, "limits: {bodyReadTimeout: 50ms}\n", guard.Config{})
	resp, b := sendTo(t, ts, "POST", PathChat, "", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, jsonType)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"content":"b"`) || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// Past limits.maxInFlight a request is answered 503 overloaded with Retry-After; the health checks
// are still answered.
func TestInFlightCap(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		okCompletion(w, r)
	})
	ts, _ := guardedProxy(t, up.URL, "limits: {maxInFlight: 1}\n", guard.Config{})
	first := make(chan int, 1)
	go func() {
		resp, err := http.Post(ts.URL+PathChat, "application/json", strings.NewReader(chatBody))
		if err != nil {
			first <- 0
			return
		}
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	<-up.received // the first request holds the only slot
	resp, b := sendTo(t, ts, "POST", PathChat, "", chatBody, jsonType)
	assertAPIError(t, resp, b, http.StatusServiceUnavailable, "overloaded")
	if resp.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	if resp, _ := sendTo(t, ts, "GET", "/v1/models", "", "", nil); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("passthrough past the cap: %d", resp.StatusCode)
	}
	if resp, b := sendTo(t, ts, "GET", PathHealthz, "", "", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("healthz past the cap: %d %s", resp.StatusCode, b)
	}
	close(release)
	if got := <-first; got != http.StatusOK {
		t.Fatalf("first request: %d", got)
	}
	if resp, b := sendTo(t, ts, "POST", PathChat, "", chatBody, jsonType); resp.StatusCode != http.StatusOK {
		t.Fatalf("after the first ended: %d %s", resp.StatusCode, b)
	}
}

// A client that goes away before its answer is complete — while the upstream thinks, in the middle
// of a stream, in the middle of a passed-through answer — is counted as 499, not 200.
func TestClientGoneCountedAs499(t *testing.T) {
	t.Parallel()
	gone := make(chan struct{}, 3)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/models":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","data":[`)
			w.(http.Flusher).Flush()
		case strings.Contains(r.Header.Get("X-Case"), "stream"):
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: "+chunk(`{"content":"x"}`, "")+"\n\n")
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
		gone <- struct{}{}
	})
	e := testEngine(t, "", nil, nil, nil)
	m := metrics.New(e.defs.Versions)
	u, _ := url.Parse(up.URL + "/v1")
	s, err := New(Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Int32
	done := make(chan struct{}, 3)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { served.Add(1); done <- struct{}{} }()
		s.ServeHTTP(w, r)
	}))
	defer ts.Close()
	for _, c := range []struct{ name, method, path, body string }{
		{"waiting", "POST", PathChat, chatBody},
		{"stream", "POST", PathChat, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"passthrough", "GET", "/v1/models", ""},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		var rd io.Reader
		if c.body != "" {
			rd = strings.NewReader(c.body)
		}
		req, _ := http.NewRequestWithContext(ctx, c.method, ts.URL+c.path, rd)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Case", c.name)
		errc := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, _ = bufio.NewReader(resp.Body).ReadByte() // the answer has begun
				resp.Body.Close()
			}
			errc <- err
		}()
		<-up.received
		if c.name != "waiting" {
			<-errc
		}
		cancel()
		<-gone
		<-done
	}
	mts := httptest.NewServer(m.Handler())
	defer mts.Close()
	resp, err := http.Get(mts.URL)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`promptgate_requests_total{protocol="neutral",route="chat",status="499"} 2`,
		`promptgate_requests_total{protocol="none",route="passthrough",status="499"} 1`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(string(text), `status="200"`) {
		t.Errorf("a request whose client went away was counted as 200:\n%s", grepMetric(string(text), "promptgate_requests_total"))
	}
}

func grepMetric(text, name string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name) {
			out = append(out, l)
		}
	}
	return fmt.Sprint(out)
}

// The official SDK's multipart uploads (the files API, audio transcriptions) pass through the
// listener's checks unchanged, byte for byte, under the default guard.
func TestSDKMultipartUploadsPassThrough(t *testing.T) {
	t.Parallel()
	content := bytes.Repeat([]byte("{\"prompt\":\"p\",\"completion\":\"c\"}\n"), 8000)
	type part struct{ name, filename, value string }
	got := make(chan []part, 2)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mr, err := r.MultipartReader()
		if err != nil {
			http.Error(w, `{"error":{"message":"not multipart"}}`, http.StatusBadRequest)
			return
		}
		var parts []part
		for {
			p, err := mr.NextPart()
			if err != nil {
				break
			}
			b, _ := io.ReadAll(p)
			parts = append(parts, part{p.FormName(), p.FileName(), string(b)})
		}
		got <- parts
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/files":
			_, _ = io.WriteString(w, `{"id":"file-1","object":"file","bytes":1,"created_at":1,"filename":"train.jsonl","purpose":"fine-tune","status":"uploaded"}`)
		default:
			_, _ = io.WriteString(w, `{"text":"hello"}`)
		}
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL + "/v1")
	s, err := New(Options{Engine: testEngine(t, "", nil, nil, nil), Upstreams: map[string]Upstream{"openai": {URL: u}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	client := newClient(ts)
	f, err := client.Files.New(context.Background(), openai.FileNewParams{File: openai.File(bytes.NewReader(content), "train.jsonl", "application/jsonl"), Purpose: openai.FilePurposeFineTune})
	if err != nil || f.ID != "file-1" {
		t.Fatalf("files upload: %v %+v", err, f)
	}
	parts := <-got
	fileOK := false
	for _, p := range parts {
		if p.name == "file" && p.filename == "train.jsonl" && p.value == string(content) {
			fileOK = true
		}
	}
	if !fileOK {
		t.Fatalf("the uploaded file did not arrive whole: %d parts", len(parts))
	}
	tr, err := client.Audio.Transcriptions.New(context.Background(), openai.AudioTranscriptionNewParams{File: openai.File(bytes.NewReader([]byte("RIFF....WAVE")), "a.wav", "audio/wav"), Model: openai.AudioModelWhisper1})
	if err != nil || tr.Text != "hello" {
		t.Fatalf("transcription: %v %+v", err, tr)
	}
	if parts := <-got; len(parts) < 2 {
		t.Fatalf("transcription parts %v", parts)
	}
}
