package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/store"
)

// testEnv is what every case of a run shares: the deployment config, the prompt settings and the
// definitions the case's protocol joins (the store's, or the built-in ones).
type testEnv struct {
	cfg      *config.File
	settings assembly.Settings
	base     store.Snapshot
	// protocols are the records of the cases' protocols, by protocolRef.String().
	protocols map[string]store.Record
}

// caseUpstream is the base URL the upstream table's "openai" line names in a case: the case's transport
// answers every request, and no connection is made.
func caseUpstream() *url.URL { return &url.URL{Scheme: "https", Host: "api.openai.com", Path: "/v1"} }

// caseHost is the proxy listener's address the cases' requests name (loopback: the listener answers it).
const caseHost = "127.0.0.1:8787"

// outcome is what came of running one case through the proxy.
type outcome struct {
	status int
	header http.Header
	client []byte
	// prepared is nil when the request was refused before it went upstream.
	prepared *preparedView
	// decisions are the decisions on the answer's calls, in the order they were taken.
	decisions []vet.Decision
	// asked is how many answers the proxy asked the upstream for; sent the bodies it sent.
	asked int
	sent  [][]byte
	// panicked is what the handler panicked with (the reverse proxy aborts an answer it cannot finish so).
	panicked any
}

// preparedView is what a case checks of the prepared request.
type preparedView struct {
	protocol string
	version  int
	kept     []string
	removed  []policy.Removal
	prompt   string
	stream   bool
}

// runCase runs c through the proxy's own handler, in process: the request goes in as a client's would, the
// upstream is a transport that plays the case's answers, and an observer keeps what the proxy decided.
func (te *testEnv) runCase(ctx context.Context, c *testCase) (*outcome, error) {
	rec := te.protocols[c.protocol.String()]
	snap := store.Snapshot{Templates: te.base.Templates, Protocols: maps.Clone(te.base.Protocols), Tools: te.base.Tools}
	snap.Protocols[rec.Name] = rec
	defs, err := proxy.NewDefinitions(ctx, snapshotStore{snap}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	defer defs.Close()
	pol := te.cfg.Policy()
	pol.Routes, pol.DefaultProtocol = nil, rec.Name
	engine, err := proxy.NewEngine(proxy.EngineOptions{Defs: defs, Policy: pol, Settings: te.settings, Limits: te.cfg.Limits})
	if err != nil {
		return nil, err
	}
	obs := &caseObserver{}
	tr := &caseTransport{answers: c.answers}
	srv, err := proxy.New(proxy.Options{
		Engine: engine, Transport: tr, Observer: obs, Audit: audit.Multi{},
		Upstreams: map[string]proxy.Upstream{"openai": {URL: caseUpstream()}},
	})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+caseHost+c.path, bytes.NewReader(c.request))
	if err != nil {
		return nil, err
	}
	req.Header = c.header.Clone()
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.RemoteAddr = "127.0.0.1:40000"
	w := &captureWriter{header: http.Header{}}
	out := &outcome{}
	func() {
		defer func() { out.panicked = recover() }()
		srv.ServeHTTP(w, req)
	}()
	out.status, out.header, out.client = w.code(), w.header, w.body.Bytes()
	out.prepared, out.decisions = obs.result()
	out.asked, out.sent = tr.result()
	return out, nil
}

// snapshotStore serves one snapshot of definitions, which never changes, to the engine of one case.
type snapshotStore struct{ snap store.Snapshot }

var _ proxy.Snapshots = snapshotStore{}

func (s snapshotStore) Snapshot(context.Context) (store.Snapshot, error) { return s.snap, nil }
func (s snapshotStore) Watch(func()) func()                              { return func() {} }

// caseObserver keeps what the proxy decided for the case's request.
type caseObserver struct {
	mu        sync.Mutex
	prepared  *preparedView
	decisions []vet.Decision
}

var _ proxy.Observer = (*caseObserver)(nil)

func (o *caseObserver) Prepared(_ context.Context, p *proxy.Prepared) {
	v := &preparedView{protocol: p.Protocol.ID, version: p.Protocol.Version, removed: slices.Clone(p.Removed),
		prompt: p.Prompt.System(), stream: p.Stream}
	for _, t := range p.Kept {
		v.kept = append(v.kept, t.Name)
	}
	o.mu.Lock()
	o.prepared = v
	o.mu.Unlock()
}

func (o *caseObserver) Decided(_ context.Context, d vet.Decision) {
	d.Args, d.Notice = slices.Clone(d.Args), "" // a copy: d's are not kept past the call
	d.More = slices.Clone(d.More)
	for i := range d.More {
		d.More[i].Args, d.More[i].Notice = nil, ""
	}
	o.mu.Lock()
	o.decisions = append(o.decisions, d)
	o.mu.Unlock()
}

func (o *caseObserver) result() (*preparedView, []vet.Decision) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.prepared, o.decisions
}

// caseTransport is the upstream of a case: it answers the n-th request promptgate sends with the case's n-th
// answer, and keeps what it was sent. It reaches no network.
type caseTransport struct {
	mu      sync.Mutex
	answers []answer
	sent    [][]byte
}

// errNoAnswer: the proxy asked the upstream once more than the case has answers for.
var errNoAnswer = errors.New("the case has no answer for this request")

func (t *caseTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	t.mu.Lock()
	t.sent = append(t.sent, body)
	n := len(t.sent)
	t.mu.Unlock()
	if n > len(t.answers) {
		return nil, errNoAnswer
	}
	a := t.answers[n-1]
	resp := &http.Response{
		Status: strconv.Itoa(a.status) + " " + http.StatusText(a.status), StatusCode: a.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: a.header.Clone(),
		Body: &chunkReader{chunks: a.chunks}, ContentLength: -1, Request: req,
	}
	if !a.stream {
		resp.ContentLength = int64(len(a.bytes()))
		resp.Header.Set("Content-Length", strconv.Itoa(len(a.bytes())))
	}
	return resp, nil
}

func (t *caseTransport) result() (int, [][]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sent), t.sent
}

// chunkReader plays chunks, one per Read at most (a stream arrives event by event, as an upstream sends it).
type chunkReader struct {
	chunks [][]byte
	off    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.chunks) > 0 && r.off == len(r.chunks[0]) {
		r.chunks, r.off = r.chunks[1:], 0
	}
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0][r.off:])
	r.off += n
	return n, nil
}

func (r *chunkReader) Close() error { return nil }

// captureWriter is the client's side of a case: it keeps the status, the headers and the body.
type captureWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *captureWriter) Header() http.Header { return w.header }

func (w *captureWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *captureWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}

// Flush is a no-op: the whole answer is read when the handler returns.
func (w *captureWriter) Flush() {}

func (w *captureWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// errorCode is the code of the OpenAI-shaped error in a body, or of the error event of a stream ("" when
// there is none).
func errorCode(body []byte) string {
	if c := gjson.GetBytes(body, "error.code"); c.Exists() {
		return c.String()
	}
	for _, line := range bytes.Split(body, []byte("\n")) {
		if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data:")); ok {
			if c := gjson.GetBytes(bytes.TrimSpace(data), "error.code"); c.Exists() {
				return c.String()
			}
		}
	}
	return ""
}

// elapsed formats a case's time as go test does.
func elapsed(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
