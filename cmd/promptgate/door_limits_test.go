package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestDoorInFlightCapIsTheDoors: limits.maxInFlight bounds the requests the door serves at once, whatever
// the number of origins they name: a client that names another port of an intercepted host for each request
// (a pipeline each) is answered 503 overloaded past the cap, as on the base-URL listener.
func TestDoorInFlightCapIsTheDoors(t *testing.T) {
	// The mitm argument closes its mapping early to add a limits section.
	s := startDoorServe(t, nil, "hosts: [127.0.0.1]}\nlimits: {maxInFlight: 2")
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.caPEM)
	// tunnel opens an intercepted tunnel to 127.0.0.1:port and starts a request on it: its headers, with
	// Expect: 100-continue, and the answer's first line is returned. A request in flight reads its body, so
	// "100 Continue" says it holds a slot (its body is never sent).
	tunnel := func(port string) string {
		t.Helper()
		c, err := net.Dial("tcp", s.door)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		target := "127.0.0.1:" + port
		if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 0, 64)
		for !strings.HasSuffix(string(head), "\r\n\r\n") {
			b := make([]byte, 1)
			if _, err := c.Read(b); err != nil {
				t.Fatalf("CONNECT %s: %q %v", target, head, err)
			}
			head = append(head, b[0])
		}
		if !strings.HasPrefix(string(head), "HTTP/1.1 200") {
			t.Fatalf("CONNECT %s: %q", target, head)
		}
		tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"})
		if _, err := io.WriteString(tc, "POST /v1/chat/completions HTTP/1.1\r\nHost: "+target+"\r\nContent-Type: application/json\r\n"+
			"Content-Length: 100\r\nExpect: 100-continue\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(tc).ReadString('\n')
		if err != nil {
			t.Fatalf("request through %s: %v", target, err)
		}
		return line
	}
	for _, port := range []string{"1001", "1002"} {
		if line := tunnel(port); !strings.HasPrefix(line, "HTTP/1.1 100") {
			t.Fatalf("request %s: %q, want it in flight", port, line)
		}
	}
	if line := tunnel("1003"); !strings.HasPrefix(line, "HTTP/1.1 503") {
		t.Fatalf("a third request in flight through the door, to a third origin, with limits.maxInFlight 2: %q, want 503", line)
	}
	if line := tunnel("1001"); !strings.HasPrefix(line, "HTTP/1.1 503") {
		t.Fatalf("a third request in flight through the door, to a held origin: %q, want 503", line)
	}
}
