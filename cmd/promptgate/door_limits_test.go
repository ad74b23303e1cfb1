package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// tunnel opens an intercepted tunnel to target through s's door and completes a TLS handshake in
// it.
func tunnel(t *testing.T, s *doorServe, target string) *tls.Conn {
	t.Helper()
	c, err := net.Dial("tcp", s.door)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 0, 64)
	for !strings.HasSuffix(string(head), "\r\n\r\n") { // byte by byte: the TLS bytes that follow stay unread
		b := make([]byte, 1)
		if _, err := c.Read(b); err != nil {
			t.Fatalf("CONNECT %s: %q %v", target, head, err)
		}
		head = append(head, b[0])
	}
	if !strings.HasPrefix(string(head), "HTTP/1.1 200") {
		t.Fatalf("CONNECT %s: %q", target, head)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.caPEM)
	host, _, _ := net.SplitHostPort(target)
	tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: host})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS in the tunnel to %s: %v", target, err)
	}
	return tc
}

// TestDoorInFlightCapIsTheDoors: limits.maxInFlight bounds the requests the door serves at once,
// whatever the number of origins they name: a client that names another port of an intercepted host
// for each request (a pipeline each) is answered 503 overloaded past the cap, as on the base-URL
// listener.
func TestDoorInFlightCapIsTheDoors(t *testing.T) {
	// The mitm argument closes its mapping early to add a limits section.
	s := startDoorServe(t, nil, "hosts: [127.0.0.1]}\nlimits: {maxInFlight: 2")
	// start sends a request's headers with Expect: 100-continue and returns the answer's first
	// line: a request in flight reads its body, so "100 Continue" says it holds a slot (its body is
	// never sent).
	start := func(port string) string {
		t.Helper()
		tc := tunnel(t, s, "127.0.0.1:"+port)
		if _, err := io.WriteString(tc, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:"+port+"\r\nContent-Type: application/json\r\n"+
			"Content-Length: 100\r\nExpect: 100-continue\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(tc).ReadString('\n')
		if err != nil {
			t.Fatalf("request through 127.0.0.1:%s: %v", port, err)
		}
		return line
	}
	for _, port := range []string{"1001", "1002"} {
		if line := start(port); !strings.HasPrefix(line, "HTTP/1.1 100") {
			t.Fatalf("request %s: %q, want it in flight", port, line)
		}
	}
	if line := start("1003"); !strings.HasPrefix(line, "HTTP/1.1 503") {
		t.Fatalf("a third request in flight through the door, to a third origin, with limits.maxInFlight 2: %q, want 503", line)
	}
	if line := start("1001"); !strings.HasPrefix(line, "HTTP/1.1 503") {
		t.Fatalf("a third request in flight through the door, to a held origin: %q, want 503", line)
	}
}

// TestDoorTunnelsKeepTheListenerTimeouts: inside an intercepted tunnel, limits.headerReadTimeout
// holds as on the listeners: a client that completes its TLS handshake and then sends no request,
// or half of one, is closed after it (100ms here), not after a fixed 10 s.
func TestDoorTunnelsKeepTheListenerTimeouts(t *testing.T) {
	// The mitm argument closes its mapping early to add a limits section.
	s := startDoorServe(t, nil, "hosts: [127.0.0.1]}\nlimits: {headerReadTimeout: 100ms, idleTimeout: 100ms")
	for _, sent := range []string{"", "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0"} {
		tc := tunnel(t, s, "127.0.0.1:1001")
		if _, err := io.WriteString(tc, sent); err != nil {
			t.Fatal(err)
		}
		_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.ReadAll(tc)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a tunnel that sent %q was still open after 5 s with limits.headerReadTimeout 100ms", sent)
		}
	}
}
