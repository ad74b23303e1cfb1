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

// TestPassthroughUpgrade: a protocol upgrade on a passed-through path (the Realtime API's WebSocket
// at /v1/realtime) reaches the upstream with its key and becomes a two-way byte tunnel through the
// proxy.
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
	_, err = io.WriteString(conn, "GET /v1/realtime?model=m HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sk-client\r\n"+
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

// TestPassthroughFullDuplex: a passed-through request whose answer starts streaming before its body
// has all arrived (an upload answered with progress, a retrieval that the official client asks with
// a body) keeps both directions open: the rest of the body still reaches the upstream, and the
// answer is not cut off. (Without full duplex, net/http closes the request body once the answer's
// headers go out, and the transport then drops the upstream connection in the middle of the
// answer.)
func TestPassthroughFullDuplex(t *testing.T) {
	const size = 1 << 20
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: started\n\n")
		http.NewResponseController(w).Flush()
		n, err := io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "data: got "+strconvI(int(n))+" "+errString(err)+"\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	ts := newProxy(t, up.URL, "", nil)

	pr, pw := io.Pipe()
	defer pw.CloseWithError(io.ErrClosedPipe) // a failed test unwinds instead of hanging on the body
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/uploads/upload_1/parts", pr)
	req.ContentLength = size
	type result struct {
		resp *http.Response
		err  error
	}
	got := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		got <- result{resp, err}
	}()
	chunk := strings.Repeat("x", 1024)
	if _, err := io.WriteString(pw, chunk); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("no answer while the request body was still being sent")
	}
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer res.resp.Body.Close()
	br := bufio.NewReader(res.resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "data: started\n" {
		t.Fatalf("first line %q %v", line, err)
	}
	// The rest of the body goes out only now that the answer has begun.
	go func() {
		for sent := len(chunk); sent < size; sent += len(chunk) {
			if _, err := io.WriteString(pw, chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "data: got "+strconvI(size)+" <nil>\n") || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("rest of the answer %q %v", rest, err)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
