package proxy

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// earlyUpstream is an upstream that answers each request as soon as its headers are in, before it
// reads any of its body (which it reads afterwards, to keep its connection in step).
func earlyUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				serveEarly(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// serveEarly answers every request on c with a small JSON body before reading the request's body.
func serveEarly(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"); err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
	}
}

// TestPassthroughBodyDoneBeforeHandlerReturns sends, on one keep-alive connection, hundreds of
// passed-through requests with a body whose upstream does not read it before answering: an upstream
// that answers as soon as the headers are in, and one that cannot be reached at all. With full
// duplex on, net/http leaves the request body to the handler; a body the transport read after the
// handler returned (or one it never read, which the server then reads to its end itself) started
// the connection's background read after the server had stopped it, and the server's next read of
// the connection panicked ("invalid concurrent Body.Read call", golang/go#68560), dropping the
// connection. Every request must be answered on the one connection, and the server must log no
// panic. The body comes in one write, and in two with a pause between them longer than the
// transport waits for a request's body to be written once its answer is read (the transport is then
// still reading the body when the answer is complete).
func TestPassthroughBodyDoneBeforeHandlerReturns(t *testing.T) {
	unreachable := "http://" + unreachableAddr(t)
	for _, tc := range []struct {
		name   string
		up     string
		status int
	}{
		{"early answer", earlyUpstream(t), http.StatusOK},
		{"unreachable", unreachable, http.StatusBadGateway},
	} {
		for _, split := range []bool{false, true} {
			name := tc.name
			if split {
				name += "/split body"
			}
			t.Run(name, func(t *testing.T) {
				logs := &syncBuffer{}
				ts := passthroughProxy(t, tc.up, logs)
				client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
				t.Cleanup(client.CloseIdleConnections)
				n := 300
				if split {
					n = 8
				}
				for i := range n {
					var body io.Reader = strings.NewReader(`{"input":"some text to embed"}`)
					if split {
						body = &pausedBody{parts: []string{`{"input":"some text`, ` to embed"}`}, pause: 80 * time.Millisecond}
					}
					req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/embeddings", body)
					req.ContentLength = int64(len(`{"input":"some text to embed"}`))
					resp, err := client.Do(req)
					if err != nil {
						t.Fatalf("request %d: %v; server log: %s", i, err, logs)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != tc.status {
						t.Fatalf("request %d: status %d, want %d", i, resp.StatusCode, tc.status)
					}
				}
				ts.Close()
				if s := logs.String(); strings.Contains(s, "panic") {
					t.Fatalf("the server panicked: %s", s)
				}
			})
		}
	}
}

// passthroughProxy is a proxy whose upstream is up, served by an http.Server that logs to logs.
func passthroughProxy(t *testing.T, up string, logs io.Writer) *httptest.Server {
	t.Helper()
	u, err := url.Parse(up + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Engine: testEngine(t, "", nil, nil, nil), Upstreams: map[string]Upstream{"openai": {URL: u}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s)
	ts.Config.ErrorLog = log.New(logs, "", 0)
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

// pausedBody is a request body sent in parts, with a pause before each part after the first.
type pausedBody struct {
	parts []string
	pause time.Duration
	sent  int
}

func (b *pausedBody) Read(p []byte) (int, error) {
	if b.sent == len(b.parts) {
		return 0, io.EOF
	}
	if b.sent > 0 {
		time.Sleep(b.pause)
	}
	n := copy(p, b.parts[b.sent])
	b.parts[b.sent] = b.parts[b.sent][n:]
	if b.parts[b.sent] == "" {
		b.sent++
	}
	return n, nil
}
