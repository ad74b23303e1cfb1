package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestPassthroughUpgrade: a protocol upgrade on a passed-through path (the Realtime API's WebSocket at
// /v1/realtime) reaches the upstream with its key and becomes a two-way byte tunnel through the proxy.
func TestPassthroughUpgrade(t *testing.T) {
	gotAuth := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/realtime" || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "want an upgrade of /v1/realtime, got "+r.URL.Path, http.StatusBadRequest)
			return
		}
		gotAuth <- r.Header.Get("Authorization")
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
		// Echo, upper-cased, until the client closes.
		buf := make([]byte, 64)
		for {
			n, err := brw.Read(buf)
			if n > 0 {
				_, _ = conn.Write([]byte(strings.ToUpper(string(buf[:n]))))
			}
			if err != nil {
				return
			}
		}
	}))
	defer up.Close()
	ts := newProxy(t, up.URL, "", nil)

	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	_, err = io.WriteString(conn, "GET /v1/realtime?model=m HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-client\r\n"+
		"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d, want 101: %s", resp.StatusCode, b)
	}
	if a := <-gotAuth; a != "Bearer sk-client" {
		t.Errorf("upstream Authorization %q", a)
	}
	for _, msg := range []string{"hello", "again"} {
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != strings.ToUpper(msg) {
			t.Errorf("tunnel echoed %q, want %q", got, strings.ToUpper(msg))
		}
	}
}
