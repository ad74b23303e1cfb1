package mitm_test

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/promptgate/promptgate/proxy/mitm"
)

// service is a plain-HTTP server on loopback standing for something private (an admin API, a model
// server), recording what reaches it.
type service struct {
	*httptest.Server
	mu      sync.Mutex
	headers []http.Header
}

func newService(t *testing.T) *service {
	t.Helper()
	s := &service{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.headers = append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		_, _ = io.WriteString(w, "private service")
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *service) hits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.headers)
}

func (s *service) port() string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

// viaDoor sends a plain-HTTP proxy request for target through the door (Go's own proxy settings
// would skip loopback targets, so the proxy is set directly), with extra request headers.
func (f *fixture) viaDoor(t *testing.T, target string, header http.Header) (int, string) {
	t.Helper()
	pu, _ := url.Parse(f.proxyURL)
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	req, _ := http.NewRequest(http.MethodGet, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connect sends CONNECT target to the door on a raw connection and returns the door's answer and
// the connection (open when the answer is 200).
func (f *fixture) connect(t *testing.T, target string, header string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(f.proxyURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n"+header+"\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return resp, c, br
}

// TestPassthroughRefusesLoopback: a client of the door cannot reach a loopback service by address
// or by a name that resolves to loopback, through a tunnel or a plain-HTTP request.
func TestPassthroughRefusesLoopback(t *testing.T) {
	svc := newService(t)
	f := newFixture(t, true, true, func(o *mitm.Options) { o.Resolve = nil }) // the system resolver
	for _, host := range []string{"127.0.0.1", "localhost", "LOCALHOST.", "[::ffff:127.0.0.1]"} {
		target := host + ":" + svc.port()
		if status, body := f.viaDoor(t, "http://"+target+"/admin/templates", nil); status != http.StatusForbidden || !strings.Contains(body, "loopback") {
			t.Errorf("GET http://%s through the door: %d %q", target, status, body)
		}
		resp, _, _ := f.connect(t, target, "")
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "mitm.allowPrivateDestinations") {
			t.Errorf("CONNECT %s: %d %q", target, resp.StatusCode, b)
		}
	}
	if n := svc.hits(); n != 0 {
		t.Errorf("the loopback service was reached %d times", n)
	}
}

// TestAllowPrivateDestinations: a listed host name, or a listed address, is reached; the same
// service under a name or address not listed is not; promptgate's own listeners are never reached,
// listed or not.
func TestAllowPrivateDestinations(t *testing.T) {
	svc := newService(t)
	t.Run("a listed name", func(t *testing.T) {
		f := newFixture(t, true, true, func(o *mitm.Options) { o.Resolve = nil; o.AllowPrivate = []string{"Localhost."} })
		if status, body := f.viaDoor(t, "http://localhost:"+svc.port()+"/", nil); status != 200 || body != "private service" {
			t.Errorf("listed name: %d %q", status, body)
		}
		if resp, _, _ := f.connect(t, "localhost:"+svc.port(), ""); resp.StatusCode != 200 {
			t.Errorf("CONNECT to a listed name: %d", resp.StatusCode)
		}
		if status, _ := f.viaDoor(t, "http://127.0.0.1:"+svc.port()+"/", nil); status != http.StatusForbidden {
			t.Errorf("its address, not listed: %d", status)
		}
	})
	t.Run("a listed address", func(t *testing.T) {
		f := newFixture(t, true, true, func(o *mitm.Options) { o.Resolve = nil; o.AllowPrivate = []string{"127.0.0.1"} })
		if status, body := f.viaDoor(t, "http://127.0.0.1:"+svc.port()+"/", nil); status != 200 || body != "private service" {
			t.Errorf("listed address: %d %q", status, body)
		}
	})
	t.Run("own listeners never", func(t *testing.T) {
		f := newFixture(t, true, true, func(o *mitm.Options) {
			o.Resolve = nil
			o.AllowPrivate = []string{"127.0.0.1", "localhost"}
			o.Own = func() []net.Addr { return []net.Addr{svc.Listener.Addr()} }
		})
		before := svc.hits()
		for _, target := range []string{"127.0.0.1:" + svc.port(), "localhost:" + svc.port()} {
			if status, body := f.viaDoor(t, "http://"+target+"/", nil); status != http.StatusForbidden || !strings.Contains(body, "own listeners") {
				t.Errorf("own listener %s: %d %q", target, status, body)
			}
			if resp, _, _ := f.connect(t, target, ""); resp.StatusCode != http.StatusForbidden {
				t.Errorf("CONNECT to own listener %s: %d", target, resp.StatusCode)
			}
		}
		if svc.hits() != before {
			t.Error("an own listener was reached")
		}
	})
}

// TestProxyToken: with a token, every proxy request needs it (407 otherwise, with a challenge);
// Bearer and Basic (token as the password) are accepted; the header never goes on.
func TestProxyToken(t *testing.T) {
	svc := newService(t)
	f := newFixture(t, true, true, func(o *mitm.Options) {
		o.Resolve = nil
		o.AllowPrivate = []string{"127.0.0.1"}
		o.Token = "s3cret-proxy-token"
	})
	target := "127.0.0.1:" + svc.port()
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, bad := range []string{"", "Bearer wrong", "Bearer s3cret-proxy-tokenX", basic("promptgate", "wrong"), basic("s3cret-proxy-token", ""), "Basic !!!", "s3cret-proxy-token"} {
		h := http.Header{}
		if bad != "" {
			h.Set("Proxy-Authorization", bad)
		}
		if status, _ := f.viaDoor(t, "http://"+target+"/", h); status != http.StatusProxyAuthRequired {
			t.Errorf("plain request with %q: %d", bad, status)
		}
		line := ""
		if bad != "" {
			line = "Proxy-Authorization: " + bad + "\r\n"
		}
		resp, _, _ := f.connect(t, target, line)
		if resp.StatusCode != http.StatusProxyAuthRequired || len(resp.Header.Values("Proxy-Authenticate")) == 0 {
			t.Errorf("CONNECT with %q: %d %v", bad, resp.StatusCode, resp.Header)
		}
	}
	if n := svc.hits(); n != 0 {
		t.Fatalf("unauthenticated requests reached the service %d times", n)
	}
	for _, good := range []string{"Bearer s3cret-proxy-token", "bearer s3cret-proxy-token", basic("promptgate", "s3cret-proxy-token"), basic("", "s3cret-proxy-token")} {
		if status, body := f.viaDoor(t, "http://"+target+"/", http.Header{"Proxy-Authorization": {good}}); status != 200 || body != "private service" {
			t.Errorf("plain request with %q: %d %q", good, status, body)
		}
		if resp, _, _ := f.connect(t, target, "Proxy-Authorization: "+good+"\r\n"); resp.StatusCode != 200 {
			t.Errorf("CONNECT with %q: %d", good, resp.StatusCode)
		}
	}
	svc.mu.Lock()
	for _, h := range svc.headers {
		if v := h.Get("Proxy-Authorization"); v != "" {
			t.Errorf("Proxy-Authorization forwarded: %q", v)
		}
	}
	svc.mu.Unlock()
	// Go's transport sends a proxy URL's user info as Basic: the documented client setting works.
	pu, _ := url.Parse(f.proxyURL)
	pu.User = url.UserPassword("promptgate", "s3cret-proxy-token")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.pgCAPEM)
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Post("https://api.openai.test:"+f.port+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("intercepted request with the token in the proxy URL: %d", resp.StatusCode)
	}
	// The listener's own health check needs no token.
	if hr, err := http.Get(f.proxyURL + "/healthz"); err != nil || hr.StatusCode != 200 {
		t.Errorf("healthz: %v %v", err, hr)
	} else {
		hr.Body.Close()
	}
}

// TestHandshakeDeadline: a CONNECT to an intercepted host whose client then sends nothing is closed
// by the door once the handshake timeout has passed.
func TestHandshakeDeadline(t *testing.T) {
	f := newFixture(t, true, true, func(o *mitm.Options) { o.HandshakeTimeout = 100 * time.Millisecond })
	resp, _, br := f.connect(t, "api.openai.test:"+f.port, "")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	// The read deadline of connect (20 s) only keeps a broken door from hanging the test.
	b, err := br.ReadByte()
	if os.IsTimeout(err) {
		t.Fatal("the silent connection is still open: no handshake deadline")
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("read on the silent connection: %q %v, want it closed (EOF)", b, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pipelines != 0 {
		t.Errorf("a pipeline was built for a client that never completed its handshake")
	}
}

// TestPipelinesPerNormalisedOrigin: spellings of one origin share one pipeline, and the pipelines
// kept are bounded (the least recently used is dropped, and rebuilt when its origin comes back).
func TestPipelinesPerNormalisedOrigin(t *testing.T) {
	f := newFixture(t, true, true, func(o *mitm.Options) { o.MaxPipelines = 2 })
	hc := f.client(t)
	call := func(host string) {
		t.Helper()
		resp, err := hc.Post("https://"+host+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		hc.CloseIdleConnections() // each call a new CONNECT
	}
	built := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.pipelines
	}
	for _, h := range []string{"api.openai.test:" + f.port, "API.OpenAI.TEST:" + f.port, "api.openai.test.:" + f.port, "Api.Openai.Test.:0" + f.port} {
		call(h)
	}
	if n := built(); n != 1 {
		t.Fatalf("four spellings of one origin built %d pipelines, want 1", n)
	}
	// Two other origins (other ports; nothing listens there, the pipeline answers 502) push the
	// first out.
	call("api.openai.test:1")
	call("api.openai.test:2")
	if n := built(); n != 3 {
		t.Fatalf("three origins built %d pipelines", n)
	}
	call("api.openai.test:" + f.port)
	if n := built(); n != 4 {
		t.Errorf("the least recently used origin was kept beyond MaxPipelines 2: %d pipelines built", n)
	}
}
