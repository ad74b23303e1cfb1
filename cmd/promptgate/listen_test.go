package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// closedByServer dials addr, runs talk on the connection, and reports whether the server then
// closed it (a read ends in EOF or a reset, not in the test's own guard deadline).
func closedByServer(t *testing.T, addr string, talk func(c net.Conn, br *bufio.Reader)) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second)) // a guard against a hang, not a measure
	br := bufio.NewReader(c)
	talk(c, br)
	_, err = br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err == io.EOF || errors.Is(err, syscall.ECONNRESET)
}

// The listeners' http.Server settings come from limits: a connection that sends nothing, or headers
// in part, or stays idle after an answer, is closed after the configured time; listen.hosts is
// honoured.
func TestServeListenerLimitsAndHosts(t *testing.T) {
	var hits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pg.yaml")
	yaml := "limits: {headerReadTimeout: 200ms, idleTimeout: 200ms, bodyReadTimeout: 200ms}\nlisten: {hosts: [gateway.internal]}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, nil, "--db", filepath.Join(dir, "pg.db"), "--config", cfg, "--upstream", up.URL+"/v1")
	proxyAddr := strings.TrimSuffix(strings.TrimPrefix(s.base, "http://"), "/v1")
	adminAddr := strings.TrimPrefix(s.admin, "http://")
	for name, addr := range map[string]string{"proxy": proxyAddr, "admin": adminAddr} {
		if !closedByServer(t, addr, func(net.Conn, *bufio.Reader) {}) {
			t.Errorf("%s: a connection that sent nothing was left open", name)
		}
		if !closedByServer(t, addr, func(c net.Conn, _ *bufio.Reader) { _, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: loc") }) {
			t.Errorf("%s: a connection that sent half its headers was left open", name)
		}
		if !closedByServer(t, addr, func(c net.Conn, br *bufio.Reader) {
			_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}) {
			t.Errorf("%s: an idle keep-alive connection was left open", name)
		}
		// Headers, then a body that never comes: answered (the proxy: 408), then closed.
		if !closedByServer(t, addr, func(c net.Conn, br *bufio.Reader) {
			_, _ = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if name == "proxy" && resp.StatusCode != http.StatusRequestTimeout {
				t.Errorf("proxy: a body that never came: %d", resp.StatusCode)
			}
		}) {
			t.Errorf("%s: a connection whose body never came was left open", name)
		}
	}
	get := func(host string) int {
		req, _ := http.NewRequest("GET", s.base+"/models", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get("attacker.example:8787"); got != http.StatusMisdirectedRequest {
		t.Errorf("foreign Host: %d", got)
	}
	if got := get("gateway.internal:8787"); got != http.StatusOK {
		t.Errorf("listed Host: %d", got)
	}
	if hits.Load() != 1 {
		t.Errorf("upstream hits %d, want 1", hits.Load())
	}
}
