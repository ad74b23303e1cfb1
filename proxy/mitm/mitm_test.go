package mitm_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/tidwall/gjson"
	"golang.org/x/net/http/httpproxy"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/mitm"
	"github.com/promptgate/promptgate/proxy/origin"
	"github.com/promptgate/promptgate/store"
)

// testCA is a CA of the test's own, for the fake upstream's certificates.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &testCA{cert: c, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) leaf(t *testing.T, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// fixture is a fake HTTPS upstream serving the names *.test, promptgate's door in front of it, and
// the files a deployment would have.
type fixture struct {
	upstream   *httptest.Server
	port       string
	mu         sync.Mutex
	bodies     [][]byte
	upCA       *testCA
	upCAFile   string
	pgCA       tls.Certificate
	pgCAPEM    []byte
	proxyURL   string
	dialToTest func(ctx context.Context, network, addr string) (net.Conn, error)
	pipelines  int // pipelines built by the door's Handler
}

const streamReply = "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"streamed\"},\"finish_reason\":null}]}\n\n" +
	"data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"

// resolveTest resolves the names *.test to 127.0.0.1.
func resolveTest(_ context.Context, host string) ([]netip.Addr, error) {
	if !strings.HasSuffix(host, ".test") {
		return nil, fmt.Errorf("test resolver: %q is not a test host", host)
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

func newFixture(t *testing.T, upstreamCA bool, passthrough bool, opts ...func(*mitm.Options)) *fixture {
	t.Helper()
	f := &fixture{upCA: newTestCA(t, "upstream test CA")}
	f.upstream = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.bodies = append(f.bodies, b)
		f.mu.Unlock()
		switch {
		case r.Host != "" && strings.HasPrefix(r.Host, "other.test"):
			_, _ = io.WriteString(w, "other host, untouched")
		case gjson.GetBytes(b, "stream").Bool():
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, streamReply)
		case strings.Contains(string(b), "please call a tool"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_x","type":"function","function":{"name":"exfiltrate","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello via proxy"},"finish_reason":"stop"}]}`)
		}
	}))
	f.upstream.TLS = &tls.Config{Certificates: []tls.Certificate{f.upCA.leaf(t, "api.openai.test", "other.test")}}
	f.upstream.StartTLS()
	t.Cleanup(f.upstream.Close)
	_, f.port, _ = net.SplitHostPort(f.upstream.Listener.Addr().String())
	f.dialToTest = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || !strings.HasSuffix(host, ".test") {
			return nil, fmt.Errorf("test dialer: %q is not a test host", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}
	dir := t.TempDir()
	f.upCAFile = filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(f.upCAFile, f.upCA.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	certPath, keyPath, err := mitm.WriteCA(filepath.Join(dir, "ca"), false)
	if err != nil {
		t.Fatal(err)
	}
	if f.pgCA, err = mitm.LoadCA(certPath, keyPath); err != nil {
		t.Fatal(err)
	}
	f.pgCAPEM, _ = os.ReadFile(certPath)

	extra := ""
	if upstreamCA {
		extra = f.upCAFile
	}
	roots, err := mitm.Roots(extra)
	if err != nil {
		t.Fatal(err)
	}
	engine := newEngine(t)
	tr := proxy.NewTransport()
	tr.DialContext = f.dialToTest
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	o := mitm.Options{
		CA: f.pgCA, Hosts: []string{"api.openai.test"}, Passthrough: passthrough, Resolve: resolveTest,
		// The fake upstream is on loopback: passthrough reaches it only because it is listed.
		AllowPrivate: []string{"other.test"},
		Handler: func(o origin.Origin) (http.Handler, error) {
			f.mu.Lock()
			f.pipelines++
			f.mu.Unlock()
			return proxy.New(proxy.Options{Engine: engine, Upstreams: map[string]proxy.Upstream{"openai": {URL: o.URL("/v1")}}, Transport: tr})
		},
	}
	for _, opt := range opts {
		opt(&o)
	}
	door, err := mitm.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(door)
	t.Cleanup(ps.Close)
	f.proxyURL = ps.URL
	return f
}

func newEngine(t *testing.T) *proxy.Engine {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "pg.db"), store.Options{Validate: proxy.ValidateDefinition})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	log := slog.New(slog.DiscardHandler)
	defs, err := proxy.NewDefinitions(context.Background(), st, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(defs.Close)
	e, err := proxy.NewEngine(proxy.EngineOptions{Defs: defs, Settings: assembly.DefaultSettings(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// client is configured only through HTTPS_PROXY, with a cert pool holding promptgate's CA (and
// extra roots).
func (f *fixture) client(t *testing.T, extraRoots ...[]byte) *http.Client {
	t.Helper()
	t.Setenv("HTTPS_PROXY", f.proxyURL)
	t.Setenv("HTTP_PROXY", f.proxyURL)
	t.Setenv("NO_PROXY", "")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(f.pgCAPEM)
	for _, r := range extraRoots {
		pool.AppendCertsFromPEM(r)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy:           func(r *http.Request) (*url.URL, error) { return httpproxy.FromEnvironment().ProxyFunc()(r.URL) },
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
}

func (f *fixture) lastBody(t *testing.T) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) == 0 {
		t.Fatal("upstream received nothing")
	}
	return f.bodies[len(f.bodies)-1]
}

func TestInterceptedOfficialClient(t *testing.T) {
	f := newFixture(t, true, true)
	hc := f.client(t)
	client := openai.NewClient(option.WithBaseURL("https://api.openai.test:"+f.port+"/v1"), option.WithAPIKey("sk-x"), option.WithHTTPClient(hc), option.WithMaxRetries(0))
	ctx := context.Background()

	got, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("app says"), openai.UserMessage("hi")}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Choices[0].Message.Content != "hello via proxy" {
		t.Fatalf("content %q", got.Choices[0].Message.Content)
	}
	sys := gjson.GetBytes(f.lastBody(t), "messages.0.content").String()
	if !strings.HasPrefix(sys, "=== SYSTEM CORE ===") || !strings.Contains(sys, "=== APPLICATION INSTRUCTIONS ===\napp says") {
		t.Errorf("upstream did not receive the layered prompt: %.200q", sys)
	}

	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream please")}})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || acc.Choices[0].Message.Content != "streamed" {
		t.Fatalf("stream: %v %+v", err, acc.Choices)
	}

	blocked, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("please call a tool")}})
	if err != nil {
		t.Fatal(err)
	}
	m := blocked.Choices[0].Message
	if len(m.ToolCalls) != 0 || !strings.HasPrefix(m.Content, "[promptgate] blocked tool call exfiltrate") || blocked.Choices[0].FinishReason != "stop" {
		t.Errorf("tool call not blocked: %+v", blocked.Choices[0])
	}
}

// TestPlainHTTPProxyRequestToInterceptedHostRefused: a plain-HTTP proxy request to an intercepted
// host would carry credentials in cleartext; the door refuses it, and neither the pipeline nor the
// upstream sees it.
func TestPlainHTTPProxyRequestToInterceptedHostRefused(t *testing.T) {
	f := newFixture(t, true, true)
	for _, host := range []string{"api.openai.test", "API.OpenAI.test.", "api.openai.test:" + f.port} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+host+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("Authorization", "Bearer sk-client")
		resp, err := f.client(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "only reached over HTTPS") {
			t.Errorf("%s: %d %s", host, resp.StatusCode, b)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) != 0 || f.pipelines != 0 {
		t.Errorf("a plain-HTTP request went on: upstream got %d, pipelines built %d", len(f.bodies), f.pipelines)
	}
}

func TestOtherHostTunnelledUntouched(t *testing.T) {
	f := newFixture(t, true, true)
	resp, err := f.client(t, f.upCA.pem).Get("https://other.test:" + f.port + "/anything")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "other host, untouched" {
		t.Errorf("body %q", b)
	}
	if iss := resp.TLS.PeerCertificates[0].Issuer.CommonName; iss != "upstream test CA" {
		t.Errorf("the client saw a certificate issued by %q, not the upstream's own", iss)
	}
	if resp.Header.Get("X-Request-Id") != "" {
		t.Error("a tunnelled request went through the pipeline")
	}
}

func TestUpstreamWithUntrustedCertificateRefused(t *testing.T) {
	f := newFixture(t, false, true) // no upstreamCA: the upstream's certificate is not trusted
	resp, err := f.client(t).Post("https://api.openai.test:"+f.port+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || gjson.GetBytes(b, "error.code").String() != "upstream_error" || !strings.Contains(string(b), "certificate") {
		t.Errorf("%d %s", resp.StatusCode, b)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bodies) != 0 {
		t.Error("a request reached an upstream whose certificate is not trusted")
	}
}

func TestPassthroughOffRefusesOtherHosts(t *testing.T) {
	f := newFixture(t, true, false)
	_, err := f.client(t, f.upCA.pem).Get("https://other.test:" + f.port + "/anything")
	if err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("CONNECT to a non-allowlisted host with passthrough off: %v", err)
	}
	// The allowlisted host still works.
	resp, err := f.client(t).Post("https://api.openai.test:"+f.port+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("allowlisted host: %d", resp.StatusCode)
	}
}

func TestWriteCA(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "ca")
	certPath, keyPath, err := mitm.WriteCA(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(keyPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v %v", st.Mode(), err)
	}
	if _, _, err := mitm.WriteCA(dir, false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("overwrite without force: %v", err)
	}
	if _, _, err := mitm.WriteCA(dir, true); err != nil {
		t.Errorf("overwrite with force: %v", err)
	}
	ca, err := mitm.LoadCA(certPath, keyPath)
	if err != nil || !ca.Leaf.IsCA {
		t.Fatalf("load: %v", err)
	}
	if _, err := mitm.LoadCA(certPath, filepath.Join(dir, "missing.key")); err == nil {
		t.Error("missing key loaded")
	}
	if _, err := mitm.Roots(certPath); err != nil {
		t.Errorf("roots with a PEM: %v", err)
	}
	bad := filepath.Join(dir, "bad.pem")
	_ = os.WriteFile(bad, []byte("not pem"), 0o600)
	if _, err := mitm.Roots(bad); err == nil {
		t.Error("a file without PEM was accepted as upstreamCA")
	}
}
