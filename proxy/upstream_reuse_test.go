package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestStreamKeepsUpstreamConnection checks that a stream the relay ends at [DONE] leaves its
// upstream connection reusable: the upstream's end of the chunked body ("0\r\n\r\n") comes in a
// later write than [DONE] (the handler returns after it), and a relay that stopped reading at
// [DONE] closed the body before that end, which makes the transport drop the connection, so that
// every stream paid for a new one.
func TestStreamKeepsUpstreamConnection(t *testing.T) {
	var conns atomic.Int32
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for _, e := range []string{chunk(`{"role":"assistant","content":""}`, ""), chunk(`{"content":"hi"}`, ""), chunk(`{}`, "stop"), "[DONE]"} {
			_, _ = io.WriteString(w, "data: "+e+"\n\n")
			f.Flush()
		}
		time.Sleep(5 * time.Millisecond) // the body's end comes in a write of its own, after [DONE]
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	ts := newProxy(t, up.URL, "", nil)
	const n = 5
	for i := range n {
		resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"hi"`) || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("stream %d: status %d, %v: %q", i, resp.StatusCode, err, body)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Fatalf("%d streams took %d upstream connections, want 1 reused", n, got)
	}
}

// TestStreamFinishBounded checks the bounds of reading a body's end after [DONE]: an upstream that
// keeps its body open after [DONE] does not hold the client's answer until it ends (the connection
// is dropped instead), and the trailers that come with the body's end are guarded as on any other
// answer.
func TestStreamFinishBounded(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Trailer", "X-Upstream-Note, X-Promptgate-Decision")
		f := w.(http.Flusher)
		_, _ = io.WriteString(w, "data: "+chunk(`{"content":"hi"}`, "stop")+"\n\ndata: [DONE]\n\n")
		f.Flush()
		if r.URL.Query().Get("hold") != "" {
			select { // the body stays open long after [DONE]
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		time.Sleep(5 * time.Millisecond) // the body's end, with the trailers, in a write of its own
		w.Header().Set("X-Upstream-Note", "kept")
		w.Header().Set("X-Promptgate-Decision", "forged")
	})
	ts := newProxy(t, up.URL, "", nil)
	post := func(query string) (*http.Response, string) {
		resp, err := http.Post(ts.URL+"/v1/chat/completions"+query, "application/json",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
			t.Fatalf("%s: %v: %q", query, err, body)
		}
		return resp, string(body)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		post("?hold=1")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("an upstream holding its body open after [DONE] held the client's answer")
	}
	resp, _ := post("")
	if got := resp.Trailer.Get("X-Upstream-Note"); got != "kept" {
		t.Errorf("the upstream's own trailer: %q, want it relayed", got)
	}
	if got := resp.Trailer.Get("X-Promptgate-Decision"); got != "" {
		t.Errorf("a promptgate trailer from the upstream reached the client: %q", got)
	}
}
