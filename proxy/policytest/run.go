package policytest

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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/builtin"
)

// Config is the deployment's part of a run: the tool policy (its access and kill switches), the
// prompt settings and the limits, as serve uses them. Routes and the default protocol are not used:
// each case runs under its own protocol.
type Config struct {
	Policy   policy.Config
	Settings assembly.Settings
	Limits   proxy.Limits
}

// Env is what every case of a run shares: the deployment's config and the definitions the case's
// protocol joins (a store's, or the built-in ones), with the records of the cases' protocols.
type Env struct {
	cfg  Config
	base store.Snapshot
	// protocols are the records of the cases' protocols, by ProtocolRef.String().
	protocols map[string]store.Record
	// work is what the patterns of the run's cases may still cost (MaxPatternWork at first).
	work atomic.Int64
}

// MaxPatternWork bounds what the patterns of one run (every case of an Env) may cost together, in
// instruction-bytes: a pattern's program size times the length of the text it is matched against,
// an upper bound of the steps Go's regexp takes.
const MaxPatternWork = 1 << 30

// NewEnv is an Env over the definitions base (BuiltinSnapshot, or a store's snapshot).
func NewEnv(cfg Config, base store.Snapshot) *Env {
	e := &Env{cfg: cfg, base: base, protocols: map[string]store.Record{}}
	e.work.Store(MaxPatternWork)
	return e
}

// Versions reads the stored versions of protocols: a store, or a client of a server's admin API.
type Versions interface {
	Active(ctx context.Context, kind store.Kind, name string) (store.Record, error)
	Get(ctx context.Context, kind store.Kind, name string, version int) (store.Record, error)
}

// LoadProtocols reads the protocols the cases name — definition files, checked as `protocols push`
// checks them, and versions of st (nil when no case names one) — each checked against the
// definitions it joins. A protocol that cannot be had is a problem at the field that names it.
func (e *Env) LoadProtocols(ctx context.Context, cases []*Case, st Versions) []Problem {
	var problems []Problem
	for _, c := range cases {
		key := c.Protocol.String()
		if _, done := e.protocols[key]; done {
			continue
		}
		rec, err := loadProtocol(ctx, c.Protocol, st)
		if err == nil {
			err = checkProtocolLinks(e.base, rec)
		}
		if err != nil {
			problems = append(problems, Problem{File: c.File, Line: c.Protocol.Line, Field: c.Protocol.Field, Message: err.Error()})
			e.protocols[key] = store.Record{}
			continue
		}
		e.protocols[key] = rec
	}
	return problems
}

// BuiltinSnapshot is the definitions built into the binary, as a new DB holds them.
func BuiltinSnapshot() store.Snapshot {
	s := store.Snapshot{Templates: map[string]store.Record{}, Protocols: map[string]store.Record{}}
	for _, d := range builtin.Templates() {
		s.Templates[d.Name] = store.Record{Kind: store.KindTemplate, Name: d.Name, Version: 1, Author: store.BuiltinAuthor, Body: d.Body}
	}
	for _, d := range builtin.Protocols() {
		s.Protocols[d.Name] = store.Record{Kind: store.KindProtocol, Name: d.Name, Version: 1, Author: store.BuiltinAuthor, Body: d.Body}
	}
	return s
}

// loadProtocol reads the protocol ref names: a definition file, checked as `protocols push` checks
// it, or a version of the store.
func loadProtocol(ctx context.Context, ref ProtocolRef, st Versions) (store.Record, error) {
	if ref.File != "" {
		body, err := readLimited(ref.File)
		if err != nil {
			return store.Record{}, err
		}
		name, err := store.CheckStructure(store.KindProtocol, body)
		if err == nil {
			err = proxy.ValidateDefinition(store.KindProtocol, name, body)
		}
		if err != nil {
			return store.Record{}, fmt.Errorf("%s: %w", ref.File, err)
		}
		return store.Record{Kind: store.KindProtocol, Name: name, Note: "file " + ref.File, Body: body}, nil
	}
	if st == nil {
		return store.Record{}, fmt.Errorf("protocol %s: no store to read it from", ref)
	}
	var rec store.Record
	var err error
	if ref.Version > 0 {
		rec, err = st.Get(ctx, store.KindProtocol, ref.ID, ref.Version)
	} else {
		rec, err = st.Active(ctx, store.KindProtocol, ref.ID)
	}
	if errors.Is(err, store.ErrNotFound) {
		return rec, fmt.Errorf("protocol %s is not in the store (see `promptgate protocols history %s`), or give the definition file: {file: PATH}", ref, ref.ID)
	}
	return rec, err
}

// checkProtocolLinks checks rec against the definitions it joins, as the store checks a version it
// activates (a workflow extends a protocol there, one level deep).
func checkProtocolLinks(base store.Snapshot, rec store.Record) error {
	snap := store.Snapshot{Templates: base.Templates, Protocols: map[string]store.Record{}}
	for id, r := range base.Protocols {
		snap.Protocols[id] = r
	}
	snap.Protocols[rec.Name] = rec
	return proxy.CheckLinks(snap, []string{store.Key(store.KindProtocol, rec.Name)})
}

// Run runs c through the proxy's own handler and checks what came of it. The error is one of the
// run itself (the engine could not be built), not of the case.
func (e *Env) Run(ctx context.Context, c *Case) (*Result, error) {
	start := time.Now()
	outs, err := e.runCase(ctx, c)
	if err != nil {
		return nil, err
	}
	r := &Result{Case: c}
	for i, s := range c.steps() {
		if i > 0 {
			r.Details = append(r.Details, strings.TrimPrefix(s.field, c.Field+".")+":")
		}
		if outs[i].notRun != "" {
			r.fail(s.line, s.field, "not run: %s", outs[i].notRun)
			r.Details = append(r.Details, "not run: "+outs[i].notRun)
			continue
		}
		checkStep(r, s, outs[i], &e.work)
	}
	r.Took = time.Since(start)
	return r, nil
}

// caseUpstream is the base URL the upstream table's "openai" line names in a case: the case's
// transport answers every request, and no connection is made.
func caseUpstream() *url.URL { return &url.URL{Scheme: "https", Host: "api.openai.com", Path: "/v1"} }

// caseHost is the proxy listener's address the cases' requests name (loopback: the listener answers
// it).
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
	// panicked is what the handler panicked with (the reverse proxy aborts an answer it cannot
	// finish so).
	panicked any
	// held are the calls held, in the order decided.
	held []heldCall
	// notRun says why a follow-up step was not run ("" when it was).
	notRun string
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

// runCase runs c's steps through the proxy's own handler, in process, one proxy for them all (its
// confirmation codes and its memory of violations are the conversation's): each request goes in
// as a client's would, the upstream is a transport that plays the step's answers, and an observer
// keeps what the proxy decided.
func (e *Env) runCase(ctx context.Context, c *Case) ([]*outcome, error) {
	rec, ok := e.protocols[c.Protocol.String()]
	if !ok || rec.Name == "" {
		return nil, fmt.Errorf("policytest: the protocol of %s is not loaded (see LoadProtocols)", c.Name)
	}
	snap := store.Snapshot{Templates: e.base.Templates, Protocols: maps.Clone(e.base.Protocols), Tools: e.base.Tools}
	snap.Protocols[rec.Name] = rec
	defs, err := proxy.NewDefinitions(ctx, snapshotStore{snap}, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	defer defs.Close()
	pol := e.cfg.Policy
	pol.Routes, pol.DefaultProtocol = nil, rec.Name
	engine, err := proxy.NewEngine(proxy.EngineOptions{Defs: defs, Policy: pol, Settings: e.cfg.Settings, Limits: e.cfg.Limits})
	if err != nil {
		return nil, err
	}
	obs := &caseObserver{}
	tr := &caseTransport{}
	srv, err := proxy.New(proxy.Options{
		Engine: engine, Transport: tr, Observer: obs, Audit: audit.Multi{},
		Upstreams: map[string]proxy.Upstream{"openai": {URL: caseUpstream()}},
	})
	if err != nil {
		return nil, err
	}
	var outs []*outcome
	var last *heldCall // the call held last, for the placeholders of the steps after it
	for i, s := range c.steps() {
		body, header := s.request, s.header
		if i > 0 && (hasFill(string(body)) || headerHasFill(header)) {
			if last == nil {
				outs = append(outs, &outcome{notRun: "its request gives " + fillCode + " or " + fillNotice + ", and no call was held before it"})
				continue
			}
			body, header = fillRequest(body, *last), fillHeader(header, *last)
		}
		out, err := runStep(ctx, srv, obs, tr, c.Path, s, body, header)
		if err != nil {
			return nil, err
		}
		if n := len(out.held); n > 0 {
			last = &out.held[n-1]
		}
		outs = append(outs, out)
	}
	return outs, nil
}

// headerHasFill reports whether a header value holds a placeholder.
func headerHasFill(h http.Header) bool {
	for _, vs := range h {
		if slices.ContainsFunc(vs, hasFill) {
			return true
		}
	}
	return false
}

// runStep posts one step's request, body and header as filled, to srv, with the step's answers
// played upstream.
func runStep(ctx context.Context, srv http.Handler, obs *caseObserver, tr *caseTransport, path string, s *step,
	body []byte, header http.Header) (*outcome, error) {
	obs.reset()
	tr.reset(s.answers)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+caseHost+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = header.Clone()
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
	out.prepared, out.decisions, out.held = obs.result()
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
	held      []heldCall
}

// reset forgets what was decided, for the next step.
func (o *caseObserver) reset() {
	o.mu.Lock()
	o.prepared, o.decisions, o.held = nil, nil, nil
	o.mu.Unlock()
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
	h, held := heldOf(d.Tool, d.CallID, d.Notice)
	held = held && d.Verdict == vet.VerdictHeld
	d.Args, d.Notice = slices.Clone(d.Args), "" // a copy: d's are not kept past the call
	d.More = slices.Clone(d.More)
	for i := range d.More {
		d.More[i].Args, d.More[i].Notice = nil, ""
	}
	o.mu.Lock()
	o.decisions = append(o.decisions, d)
	if held {
		o.held = append(o.held, h)
	}
	o.mu.Unlock()
}

func (o *caseObserver) result() (*preparedView, []vet.Decision, []heldCall) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.prepared, o.decisions, o.held
}

// caseTransport is the upstream of a case: it answers the n-th request promptgate sends with the
// case's n-th answer, and keeps what it was sent. It reaches no network.
type caseTransport struct {
	mu      sync.Mutex
	answers []answer
	sent    [][]byte
}

// errNoAnswer: the proxy asked the upstream once more than the case has answers for.
var errNoAnswer = errors.New("the case has no answer for this request")

// reset makes answers the ones played, from the first, for the next step.
func (t *caseTransport) reset(answers []answer) {
	t.mu.Lock()
	t.answers, t.sent = answers, nil
	t.mu.Unlock()
}

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
	n, answers := len(t.sent), t.answers
	t.mu.Unlock()
	if n > len(answers) {
		return nil, errNoAnswer
	}
	a := answers[n-1]
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

// chunkReader plays chunks, one per Read at most (a stream arrives event by event, as an upstream
// sends it).
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

// errorCode is the code of the OpenAI-shaped error in a body, or of the error event of a stream (""
// when there is none).
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
