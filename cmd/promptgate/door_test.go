package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// doorServe is a running `promptgate serve` with its HTTPS-proxy door.
type doorServe struct {
	base, admin, door string // host:port of each listener
	stderr            *syncBuffer
	caPEM             []byte // promptgate's CA, for clients of the door
}

// startDoorServe runs serve with a door on free loopback ports; mitm is the body of the config's
// mitm: mapping after caCert and caKey, e.g. "hosts: [127.0.0.1]".
func startDoorServe(t *testing.T, e map[string]string, mitm string, args ...string) *doorServe {
	t.Helper()
	return startDoorServeWith(t, e, mitm, "", args...)
}

// startDoorServeWith is startDoorServe with more of the config (YAML lines after the mitm section).
func startDoorServeWith(t *testing.T, e map[string]string, mitm, config string, args ...string) *doorServe {
	t.Helper()
	dir := t.TempDir()
	if _, _, err := runCmd(t, nil, "", "ca", "init", "--out", filepath.Join(dir, "ca")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "pg.yaml")
	body := "mitm: {caCert: " + filepath.Join(dir, "ca", "ca.crt") + ", caKey: " + filepath.Join(dir, "ca", "ca.key") + ", " + mitm + "}\n" + config
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := &doorServe{stderr: &syncBuffer{}}
	var err error
	if s.caPEM, err = os.ReadFile(filepath.Join(dir, "ca", "ca.crt")); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := run(ctx, append([]string{"serve", "--db", filepath.Join(dir, "pg.db"), "--config", cfg, "--listen", "127.0.0.1:0",
			"--admin-listen", "127.0.0.1:0", "--proxy-listen", "127.0.0.1:0"}, args...), nil, pw, s.stderr, envMap(e))
		pw.Close()
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	br := bufio.NewReader(pr)
	var lines []string
	for range 3 {
		line, err := br.ReadString('\n')
		if err != nil {
			cancel()
			t.Fatalf("serve printed %q: %v\n%s", lines, err, s.stderr.String())
		}
		lines = append(lines, line)
	}
	go func() { _, _ = io.Copy(io.Discard, br) }()
	s.base = strings.TrimSuffix(strings.TrimPrefix(strings.Fields(lines[0])[4], "http://"), "/v1")
	s.admin = strings.TrimPrefix(strings.TrimSpace(strings.Fields(lines[1])[4]), "http://")
	s.door = strings.Fields(lines[2])[4]
	return s
}

// client goes through the door (user info, if given, authenticates to it) and trusts promptgate's
// CA.
func (s *doorServe) client(t *testing.T, user *url.Userinfo) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.caPEM)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: s.door, User: user}),
		TLSClientConfig: &tls.Config{RootCAs: pool},
	}}
}

// connect sends CONNECT target to the door on a raw connection and returns its status and the
// reader of the connection.
func (s *doorServe) connect(t *testing.T, target, header string) (int, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", s.door)
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
	return resp.StatusCode, br
}

// keyedUpstream is a fake upstream that records the credentials each request brings.
type keyedUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string // "PATH auth=... key=..."
}

func newKeyedUpstream(t *testing.T, tlsOn bool) *keyedUpstream {
	t.Helper()
	u := &keyedUpstream{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, fmt.Sprintf("%s auth=%q key=%q", r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key")))
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/messages") {
			_, _ = io.WriteString(w, `{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	})
	if tlsOn {
		u.Server = httptest.NewTLSServer(h)
	} else {
		u.Server = httptest.NewServer(h)
	}
	t.Cleanup(u.Close)
	return u
}

func (u *keyedUpstream) last(t *testing.T) string {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.seen) == 0 {
		t.Fatal("the upstream received nothing")
	}
	return u.seen[len(u.seen)-1]
}

func (u *keyedUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.seen)
}

func (u *keyedUpstream) hostPort() string {
	return strings.TrimPrefix(strings.TrimPrefix(u.URL, "https://"), "http://")
}

const (
	chatBody     = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	messagesBody = `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
)

var operatorKeys = map[string]string{EnvUpstreamKey: "sk-openai-operator", EnvAnthropicKey: "sk-ant-operator"}

// TestDoorKeysGoToTheirOwnOriginOnly: with both operator keys set and the client sending none, each
// intercepted origin gets the key bound to it, if any, and no other.
func TestDoorKeysGoToTheirOwnOriginOnly(t *testing.T) {
	openaiUp, anthUp, otherUp := newKeyedUpstream(t, true), newKeyedUpstream(t, true), newKeyedUpstream(t, true)
	roots := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: openaiUp.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startDoorServe(t, operatorKeys, "hosts: [127.0.0.1], upstreamCA: "+roots,
		"--upstream", openaiUp.URL+"/v1", "--anthropic-upstream", anthUp.URL+"/v1")
	hc := s.client(t, nil)
	for _, tc := range []struct {
		name     string
		up       *keyedUpstream
		path     string
		body     string
		wantSeen string
	}{
		{"chat to the --upstream origin", openaiUp, "/v1/chat/completions", chatBody, `/v1/chat/completions auth="Bearer sk-openai-operator" key=""`},
		{"messages to the --anthropic-upstream origin", anthUp, "/v1/messages", messagesBody, `/v1/messages auth="" key="sk-ant-operator"`},
		{"chat to the Anthropic origin (OpenAI-compatible endpoint)", anthUp, "/v1/chat/completions", chatBody, `/v1/chat/completions auth="" key=""`},
		{"messages to the OpenAI origin", openaiUp, "/v1/messages", messagesBody, `/v1/messages auth="" key=""`},
		{"chat to another port of the same host", otherUp, "/v1/chat/completions", chatBody, `/v1/chat/completions auth="" key=""`},
		{"messages to another port of the same host", otherUp, "/v1/messages", messagesBody, `/v1/messages auth="" key=""`},
	} {
		resp, err := hc.Post("https://"+tc.up.hostPort()+tc.path, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := tc.up.last(t); got != tc.wantSeen {
			t.Errorf("%s: the upstream saw %s, want %s", tc.name, got, tc.wantSeen)
		}
	}

	// A plain-HTTP proxy request to an intercepted host is refused before anything goes upstream.
	before := openaiUp.count()
	resp, err := hc.Post("http://"+openaiUp.hostPort()+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "https://") {
		t.Errorf("plain HTTP to an intercepted host: %d %s", resp.StatusCode, b)
	}
	if openaiUp.count() != before {
		t.Error("a plain-HTTP request to an intercepted host reached the upstream")
	}
}

// TestBaseListenerKeysOverLoopbackHTTP: keys go to their own upstreams on the base-URL listener,
// and a plain-HTTP upstream is accepted with a key only on loopback, which serve says at start.
func TestBaseListenerKeysOverLoopbackHTTP(t *testing.T) {
	openaiUp, anthUp := newKeyedUpstream(t, false), newKeyedUpstream(t, false)
	s := startServe(t, operatorKeys, "--db", filepath.Join(t.TempDir(), "pg.db"), "--upstream", openaiUp.URL+"/v1", "--anthropic-upstream", anthUp.URL+"/v1")
	for _, tc := range []struct {
		up         *keyedUpstream
		path, body string
		wantSeen   string
	}{
		{openaiUp, "/chat/completions", chatBody, `/v1/chat/completions auth="Bearer sk-openai-operator" key=""`},
		{anthUp, "/messages", messagesBody, `/v1/messages auth="" key="sk-ant-operator"`},
	} {
		resp, err := http.Post(s.base+tc.path, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := tc.up.last(t); got != tc.wantSeen {
			t.Errorf("the upstream saw %s, want %s", got, tc.wantSeen)
		}
	}
	for _, flag := range []string{"--upstream", "--anthropic-upstream"} {
		if !strings.Contains(s.stderr.String(), flag+" is plain HTTP on loopback") {
			t.Errorf("serve did not say that %s is plain HTTP with a key; stderr:\n%s", flag, s.stderr.String())
		}
	}
}

// TestServeRefusesKeysInCleartextAndOpenDoor: a key with a non-loopback http:// upstream, and a
// door on a non-loopback address without a proxy token, stop serve before it binds anything.
func TestServeRefusesKeysInCleartextAndOpenDoor(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := runCmd(t, nil, "", "ca", "init", "--out", filepath.Join(dir, "ca")); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "pg.yaml")
	if err := os.WriteFile(cfg, []byte("mitm: {caCert: "+filepath.Join(dir, "ca", "ca.crt")+", caKey: "+filepath.Join(dir, "ca", "ca.key")+", hosts: [api.openai.com]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dir, "pg.db")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"OpenAI key to a remote http upstream", map[string]string{EnvUpstreamKey: "sk-x"}, []string{"--upstream", "http://api.example.com/v1"},
			[]string{`--upstream "http://api.example.com/v1" is plain HTTP and PROMPTGATE_UPSTREAM_API_KEY is set`, "https://"}},
		{"Anthropic key to a private http upstream", map[string]string{EnvAnthropicKey: "sk-x"}, []string{"--anthropic-upstream", "http://10.0.0.5:8080/v1"},
			[]string{`--anthropic-upstream "http://10.0.0.5:8080/v1" is plain HTTP and PROMPTGATE_ANTHROPIC_API_KEY is set`}},
		{"upstream from the environment", map[string]string{EnvUpstreamKey: "sk-x", EnvUpstream: "http://LOCALHOST.example/v1"}, nil,
			[]string{"--upstream", "plain HTTP"}},
		{"door on all interfaces without a token", nil, []string{"--config", cfg, "--proxy-listen", "0.0.0.0:0"},
			[]string{`--proxy-listen "0.0.0.0:0" is not a loopback address: set PROMPTGATE_PROXY_TOKEN`}},
		{"door on a LAN address without a token", nil, []string{"--config", cfg, "--proxy-listen", "192.168.1.10:8789"},
			[]string{"PROMPTGATE_PROXY_TOKEN"}},
		{"door address without a port", nil, []string{"--config", cfg, "--proxy-listen", "127.0.0.1"},
			[]string{"--proxy-listen", "HOST:PORT"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var errb strings.Builder
			args := append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, tc.args...)
			err := run(ctx, args, nil, io.Discard, &errb, envMap(tc.env))
			var ue usageError
			if err == nil || !errors.As(err, &ue) {
				t.Fatalf("serve %v: %v, want a usage error", tc.args, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestDoorRefusesPromptgatesOwnListeners: through the door's passthrough, a client reaches neither
// the token-less admin API on loopback nor any other listener of promptgate, by address or by name.
func TestDoorRefusesPromptgatesOwnListeners(t *testing.T) {
	s := startDoorServe(t, nil, "hosts: [api.openai.com]")
	hc := s.client(t, nil)
	_, adminPort, _ := net.SplitHostPort(s.admin)
	for _, target := range []string{
		"http://" + s.admin + "/admin/templates",
		"http://localhost:" + adminPort + "/admin/templates",
		"http://" + s.base + "/healthz",
		"http://" + s.door + "/healthz",
	} {
		resp, err := hc.Get(target)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s through the door: %d %s", target, resp.StatusCode, b)
		}
	}
	for _, target := range []string{s.admin, "localhost:" + adminPort, s.base, s.door} {
		if status, _ := s.connect(t, target, ""); status != http.StatusForbidden {
			t.Errorf("CONNECT %s: %d", target, status)
		}
	}
}

// TestDoorConfigAllowsPrivateAndTimesOutHandshakes: mitm.allowPrivateDestinations lets a listed
// local service through (never an own listener), mitm.handshakeTimeout closes a silent intercepted
// CONNECT, and PROMPTGATE_PROXY_TOKEN makes the door ask for credentials.
func TestDoorConfigAllowsPrivateAndTimesOutHandshakes(t *testing.T) {
	local := newKeyedUpstream(t, false) // a local model server
	const token = "door-token-1"
	s := startDoorServe(t, map[string]string{EnvProxyToken: token}, "hosts: [api.openai.com], allowPrivateDestinations: [localhost], handshakeTimeout: 100ms")
	hc := s.client(t, url.UserPassword("promptgate", token))
	_, localPort, _ := net.SplitHostPort(local.hostPort())
	_, adminPort, _ := net.SplitHostPort(s.admin)
	for _, tc := range []struct {
		target string
		want   int
	}{
		{"http://localhost:" + localPort + "/v1/models", http.StatusOK},
		{"http://" + local.hostPort() + "/v1/models", http.StatusForbidden}, // its address is not listed
		{"http://localhost:" + adminPort + "/admin/templates", http.StatusForbidden},
	} {
		resp, err := hc.Get(tc.target)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s: %d, want %d", tc.target, resp.StatusCode, tc.want)
		}
	}
	if resp, err := s.client(t, nil).Get("http://localhost:" + localPort + "/v1/models"); err != nil || resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("without the token: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	status, br := s.connect(t, "api.openai.com:443", "Proxy-Authorization: Bearer "+token+"\r\n")
	if status != http.StatusOK {
		t.Fatalf("CONNECT to an intercepted host: %d", status)
	}
	if b, err := br.ReadByte(); os.IsTimeout(err) || !errors.Is(err, io.EOF) {
		t.Errorf("a silent intercepted CONNECT: read %q %v, want it closed", b, err)
	}
}
