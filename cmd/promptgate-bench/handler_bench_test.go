package main

// The whole request in one process: promptgate's handler and the bare proxy's, side by side, on
// the harness's workloads, with an upstream that answers from memory (no socket, no net/http
// server or transport on either side). What is left is each proxy's own work per request, with
// its allocations counted exactly:
//
//	go test -run '^$' -bench BenchmarkHandler -benchmem ./cmd/promptgate-bench/
//
// and its profile: add -cpuprofile cpu.pprof (or -memprofile) and a -bench naming one case.

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// memUpstream is the fake upstream's answers as an http.RoundTripper: the request body is read
// whole, the answer is the canned one of the shape HeaderShape asks for, a stream given one event
// per Read, as a connection that the upstream flushes per event tends to.
type memUpstream struct{ u *fakeUpstream }

func (m memUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return nil, err
		}
		_ = req.Body.Close()
	}
	resp := &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"X-Request-Id": {"req_bench_upstream"}}, Request: req, ContentLength: -1}
	var evs [][]byte
	switch req.Header.Get(HeaderShape) {
	case shapeSSE:
		evs = m.u.sse
	case shapeSSETool:
		evs = m.u.tool
	case shapeMessagesTool:
		evs = m.u.messages
	case shapeResponsesTool:
		evs = m.u.responses
	default:
		resp.Header["Content-Type"] = []string{"application/json"}
		resp.Header["Content-Length"] = []string{strconv.Itoa(len(m.u.json))}
		resp.ContentLength = int64(len(m.u.json))
		resp.Body = io.NopCloser(bytes.NewReader(m.u.json))
		return resp, nil
	}
	resp.Header["Content-Type"] = []string{"text/event-stream"}
	resp.Header["Cache-Control"] = []string{"no-cache"}
	resp.Body = io.NopCloser(onlyReader{&eventReader{evs: append([][]byte(nil), evs...)}})
	return resp, nil
}

// discardWriter is a client connection that takes every byte at once: an http.ResponseWriter
// with Flush and the deadlines (which it does not keep), as a net/http server's writer has them.
type discardWriter struct {
	h       http.Header
	status  int
	n       int64
	flushes int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += int64(len(p))
	return len(p), nil
}
func (w *discardWriter) Flush()                           { w.flushes++ }
func (w *discardWriter) SetReadDeadline(time.Time) error  { return nil }
func (w *discardWriter) SetWriteDeadline(time.Time) error { return nil }

// inProcess is promptgate's handler and the bare proxy, both over memUpstream; queued is
// newPromptgateAudit's.
type inProcess struct {
	promptgate, baseline http.Handler
}

func newInProcess(tb testing.TB, queued bool) *inProcess {
	tb.Helper()
	tr := memUpstream{newFakeUpstream(DefaultRespBytes, DefaultChunks, 0)}
	const upstream = "http://127.0.0.1:9"
	pg, p, err := newPromptgateAudit(context.Background(), tb.TempDir(), upstream, 0, tr, queued)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Close)
	u, err := parseRoot(upstream)
	if err != nil {
		tb.Fatal(err)
	}
	return &inProcess{promptgate: pg, baseline: newBaseline(u, tr)}
}

// serve sends one request of w to h and returns what the client got; the writer's header map is
// reused (cleared) across calls, as a server's connection reuses its own.
func serve(tb testing.TB, h http.Handler, w *workload, dw *discardWriter) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://127.0.0.1:8080"+w.path(), bytes.NewReader(w.Body))
	if err != nil {
		tb.Fatal(err)
	}
	req.RemoteAddr = "127.0.0.1:40000"
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["Authorization"] = []string{"Bearer sk-bench"}
	req.Header[HeaderShape] = []string{w.Shape}
	clear(dw.h)
	dw.status, dw.n, dw.flushes = 0, 0, 0
	h.ServeHTTP(dw, req)
	if dw.status != http.StatusOK || dw.n == 0 {
		tb.Fatalf("%s: status %d, %d bytes", w.Name, dw.status, dw.n)
	}
}

// handlerWorkloads are the workloads of BenchmarkHandler: the two (chat2k, responses-tool)
// and the other tool streams.
func handlerWorkloads() []*workload {
	var out []*workload
	for _, w := range workloads() {
		switch w.Name {
		case wlSmall, wlChat2K, wlStreamTool, wlMessages, wlResponses:
			out = append(out, w)
		}
	}
	return out
}

// BenchmarkHandler: one whole request through promptgate's handler (the listener's checks, the
// request side, the upstream call over memUpstream, the answer vetted or relayed, the audit and
// metrics) beside the same request through the bare proxy, per workload.
func BenchmarkHandler(b *testing.B) {
	ip := newInProcess(b, true)
	for _, w := range handlerWorkloads() {
		for _, t := range []struct {
			name string
			h    http.Handler
		}{{targetPromptgate, ip.promptgate}, {targetBaseline, ip.baseline}} {
			b.Run(w.Name+"/"+t.name, func(b *testing.B) {
				dw := &discardWriter{h: http.Header{}}
				b.SetBytes(int64(len(w.Body)))
				b.ReportAllocs()
				loopCPU(b, func() { serve(b, t.h, w, dw) })
			})
		}
	}
}

// loopCPU runs op in b.Loop and reports, beside ns/op, the CPU time the process spent per op
// (cpu-ns/op: user and system time of every thread, the collector's included), which other work
// on a shared machine moves far less than the wall time between two ops.
func loopCPU(b *testing.B, op func()) {
	before, _, _, _ := selfUsage()
	for b.Loop() {
		op()
	}
	after, _, _, _ := selfUsage()
	b.ReportMetric(float64(after-before)/float64(b.N), "cpu-ns/op")
}
