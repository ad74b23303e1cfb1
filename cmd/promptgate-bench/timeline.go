package main

// The timeline pass: requests sent one at a time, spaced as at the fixed rate, through each target,
// with every step of each request stamped where it happens — in the client (the harness), in the
// proxy under test and in the fake upstream. The stamps are wall-clock nanoseconds, one clock for
// every process of the run, and are joined by a sequence number the client sends in HeaderSeq (both
// proxies pass it upstream unchanged). The proxies are wrapped identically (handler, request body,
// response writer, upstream transport and the answer's body), so the wrappers cost both the same.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime/trace"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// HeaderSeq carries a timeline request's sequence number from the client to the proxy and the
// upstream.
const HeaderSeq = "X-Bench-Seq"

// timelineWarmup is the number of unrecorded requests sent to each target before a workload's
// timeline.
const timelineWarmup = 50

// mark is one stamped point of a request's life in a server of the run.
type mark int

// The marks, in the order a bare proxy reaches them. A proxy stamps all of them but uBodyEOF and
// uEnd; the upstream stamps start, uBodyEOF and uEnd.
const (
	mStart       mark = iota // the handler is entered
	mBodyFirst               // the request body's first Read is called: the work before the body is done
	mBodyEOF                 // the request body's Read returned io.EOF: the body is in
	mRTStart                 // the upstream RoundTrip is entered: the request is prepared
	mUpBodyEOF               // (upstream) the request body is in
	mUpEnd                   // (upstream) the handler returned: the answer is written, to be flushed
	mRTHeaders               // RoundTrip returned: the answer's headers are in
	mRespFirst               // the answer's body gave its first bytes
	mRespEOF                 // the answer's body gave io.EOF
	mWriteHeader             // the status was written to the client
	mFirstWrite              // the first body write to the client is entered
	mLastWrite               // the last body write to the client returned
	mEnd                     // the handler returned
	nMarks
)

var markNames = [nMarks]string{"handler", "body-read-start", "body-in", "upstream-call", "upstream-body-in",
	"upstream-answered", "upstream-headers-back", "answer-first-bytes", "answer-in", "client-status",
	"client-first-write", "client-last-write", "handler-returned"}

// reqMarks are one request's stamps in one server (UnixNano, 0 when not reached) and its writes and
// flushes to the client. They may be set from more than one goroutine (a delayed flush). While an
// execution trace runs, each stamp is also logged in the request's task (category "mark"), so that
// the trace can be cut at the same points.
type reqMarks struct {
	t       [nMarks]atomic.Int64
	writes  atomic.Int64
	flushes atomic.Int64
	ctx     context.Context // the request's task; nil outside a proxy
}

func stampNow() int64 { return time.Now().UnixNano() }

// first stamps m if it is not stamped yet.
func (r *reqMarks) first(m mark) {
	if r.t[m].CompareAndSwap(0, stampNow()) {
		r.log(m)
	}
}

// last stamps m, over any earlier stamp.
func (r *reqMarks) last(m mark) {
	r.t[m].Store(stampNow())
	r.log(m)
}

func (r *reqMarks) log(m mark) {
	if r.ctx != nil && trace.IsEnabled() {
		trace.Log(r.ctx, "mark", markNames[m])
	}
}

// serverMarks is reqMarks as a server hands them to the harness.
type serverMarks struct {
	T       [nMarks]int64 `json:"t"`
	Writes  int64         `json:"writes"`
	Flushes int64         `json:"flushes"`
}

// markBook keeps the marks of the requests that carry HeaderSeq, until the harness takes them. It
// holds at most maxMarks requests; later ones are not stamped.
type markBook struct {
	mu sync.Mutex
	m  map[int64]*reqMarks
}

const maxMarks = 1 << 20

func newMarkBook() *markBook { return &markBook{m: map[int64]*reqMarks{}} }

// open returns the marks of request seq, nil when the book is full.
func (b *markBook) open(seq int64) *reqMarks {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r, ok := b.m[seq]; ok {
		return r
	}
	if len(b.m) >= maxMarks {
		return nil
	}
	r := &reqMarks{}
	b.m[seq] = r
	return r
}

// take returns every request's marks and empties the book.
func (b *markBook) take() map[int64]serverMarks {
	b.mu.Lock()
	m := b.m
	b.m = map[int64]*reqMarks{}
	b.mu.Unlock()
	out := make(map[int64]serverMarks, len(m))
	for seq, r := range m {
		var s serverMarks
		for i := range s.T {
			s.T[i] = r.t[i].Load()
		}
		s.Writes, s.Flushes = r.writes.Load(), r.flushes.Load()
		out[seq] = s
	}
	return out
}

// serve is the control endpoint GET /marks.
func (b *markBook) serve(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(b.take())
}

func seqOf(r *http.Request) (int64, bool) {
	v := r.Header.Get(HeaderSeq)
	if v == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return n, err == nil
}

type marksKey struct{}

func marksOf(ctx context.Context) *reqMarks {
	m, _ := ctx.Value(marksKey{}).(*reqMarks)
	return m
}

// wrapProxy stamps a proxy's requests: the handler, the request body and the writes to the client.
// Each stamped request is also a runtime/trace task ("request", logged with its sequence number),
// so that an execution trace of the pass shows which goroutines served it.
func (b *markBook) wrapProxy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq, ok := seqOf(r)
		var m *reqMarks
		if ok {
			m = b.open(seq)
		}
		if m == nil {
			next.ServeHTTP(w, r)
			return
		}
		ctx, task := trace.NewTask(r.Context(), "request")
		trace.Log(ctx, "seq", strconv.FormatInt(seq, 10))
		defer task.End()
		m.ctx = ctx
		m.first(mStart)
		defer m.last(mEnd)
		r = r.WithContext(context.WithValue(ctx, marksKey{}, m))
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &markedBody{ReadCloser: r.Body, m: m, start: mBodyFirst, eof: mBodyEOF}
		}
		next.ServeHTTP(&markedWriter{ResponseWriter: w, m: m}, r)
	})
}

// wrapUpstream stamps the fake upstream's requests: start, body in, answered.
func (b *markBook) wrapUpstream(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seq, ok := seqOf(r)
		var m *reqMarks
		if ok {
			m = b.open(seq)
		}
		if m == nil {
			next.ServeHTTP(w, r)
			return
		}
		m.first(mStart)
		defer m.last(mUpEnd)
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &markedBody{ReadCloser: r.Body, m: m, start: -1, eof: mUpBodyEOF}
		}
		next.ServeHTTP(w, r)
	})
}

// markedTransport stamps a proxy's upstream call and the reading of the answer's body.
type markedTransport struct{ next http.RoundTripper }

func (t markedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	m := marksOf(req.Context())
	if m == nil {
		return t.next.RoundTrip(req)
	}
	m.first(mRTStart)
	resp, err := t.next.RoundTrip(req)
	m.first(mRTHeaders)
	if err == nil && resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body = &markedBody{ReadCloser: resp.Body, m: m, start: -1, data: mRespFirst, eof: mRespEOF}
	}
	return resp, err
}

// markedBody stamps start at its first Read call, data at its first bytes and eof at io.EOF (a
// negative mark is not stamped).
type markedBody struct {
	io.ReadCloser
	m                *reqMarks
	start, data, eof mark
	started, gotData bool
}

func (b *markedBody) Read(p []byte) (int, error) {
	if !b.started {
		b.started = true
		if b.start >= 0 {
			b.m.first(b.start)
		}
	}
	n, err := b.ReadCloser.Read(p)
	if n > 0 && !b.gotData {
		b.gotData = true
		if b.data > 0 {
			b.m.first(b.data)
		}
	}
	if err == io.EOF {
		b.m.first(b.eof)
	}
	return n, err
}

// markedWriter stamps and counts the writes and flushes to the client. Flush is its own method
// because promptgate asserts http.Flusher on the writer it is given; Unwrap lets
// http.ResponseController reach the deadlines and full duplex.
type markedWriter struct {
	http.ResponseWriter
	m *reqMarks
}

func (w *markedWriter) WriteHeader(code int) {
	w.m.first(mWriteHeader)
	w.ResponseWriter.WriteHeader(code)
}

func (w *markedWriter) Write(p []byte) (int, error) {
	w.m.first(mFirstWrite)
	w.m.writes.Add(1)
	n, err := w.ResponseWriter.Write(p)
	w.m.last(mLastWrite)
	return n, err
}

func (w *markedWriter) Flush() {
	w.m.flushes.Add(1)
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *markedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// clientMarks are the harness's stamps of one timeline request (UnixNano).
type clientMarks struct {
	send, headers, firstByte, done int64
}

// timed sends request seq with HeaderSeq and stamps it; buf receives the answer.
func (g *generator) timed(ctx context.Context, seq int64, buf []byte) (clientMarks, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(g.w.Body))
	if err != nil {
		return clientMarks{}, err
	}
	req.Header = http.Header{
		"Content-Type":  {"application/json"},
		"Authorization": {"Bearer sk-bench"},
		HeaderShape:     {g.w.Shape},
		HeaderSeq:       {strconv.FormatInt(seq, 10)},
	}
	var c clientMarks
	c.send = stampNow()
	resp, err := g.client.Do(req)
	if err != nil {
		return clientMarks{}, err
	}
	defer resp.Body.Close()
	c.headers = stampNow()
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 && c.firstByte == 0 {
			c.firstByte = stampNow()
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return clientMarks{}, err
		}
	}
	c.done = stampNow()
	if resp.StatusCode != http.StatusOK {
		return clientMarks{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	return c, nil
}

// TimelineReport is one workload's timeline pass.
type TimelineReport struct {
	Workload string           `json:"workload"`
	Targets  []TargetTimeline `json:"targets"`
}

// TargetTimeline is where one target's requests spent their time: the stamped points in the order
// they are reached (by median offset from the client's send), the time between each two, and what
// the server process did per request over the pass.
type TargetTimeline struct {
	Target   string `json:"target"`
	Requests int    `json:"requests"`
	Errors   int    `json:"errors"`
	// TotalUs is the client's send to the answer's last byte.
	TotalUs Spread `json:"totalUs"`
	Steps   []Step `json:"steps"`
	// Per request, over the pass, of the proxy process (not for the direct target): CPU time (user
	// and system), voluntary and involuntary context switches (a voluntary one is a thread that
	// went to sleep: a wait), goroutines created, read and write system calls, writes and flushes
	// to the client, minor page faults and garbage collections (per 100 requests).
	CPUUs         float64 `json:"cpuUs,omitempty"`
	VolSwitches   float64 `json:"voluntarySwitches,omitempty"`
	InvolSwitches float64 `json:"involuntarySwitches,omitempty"`
	Goroutines    float64 `json:"goroutinesCreated,omitempty"`
	SysReads      float64 `json:"sysReads,omitempty"`
	SysWrites     float64 `json:"sysWrites,omitempty"`
	ClientWrites  float64 `json:"clientWrites,omitempty"`
	Flushes       float64 `json:"flushes,omitempty"`
	PageFaults    float64 `json:"pageFaults,omitempty"`
	GCsPer100     float64 `json:"gcsPer100,omitempty"`
}

// Step is the time from one stamped point to the next, over the requests: median, 10th and 90th
// percentile.
type Step struct {
	From string `json:"from"`
	To   string `json:"to"`
	Spread
}

// Spread is a median with its 10th and 90th percentiles, in microseconds.
type Spread struct {
	P50 float64 `json:"p50"`
	P10 float64 `json:"p10"`
	P90 float64 `json:"p90"`
}

// joined is one request's stamps from every process, by point name.
type joined map[string]int64

// Point names of the client's stamps.
const (
	ptSend      = "client-send"
	ptHeaders   = "client-headers"
	ptFirstByte = "client-first-byte"
	ptDone      = "client-done"
)

// join merges the stamps of one request: the client's, the proxy's (nil for the direct target) and
// the upstream's (upstream points are prefixed "upstream-"; its handler entry is
// "upstream-handler").
func join(c clientMarks, proxy, up *serverMarks) joined {
	j := joined{ptSend: c.send, ptHeaders: c.headers, ptDone: c.done}
	if c.firstByte != 0 {
		j[ptFirstByte] = c.firstByte
	}
	if proxy != nil {
		for m, t := range proxy.T {
			if t != 0 && mark(m) != mUpBodyEOF && mark(m) != mUpEnd {
				j[markNames[m]] = t
			}
		}
	}
	if up != nil {
		if up.T[mStart] != 0 {
			j["upstream-handler"] = up.T[mStart]
		}
		for _, m := range []mark{mUpBodyEOF, mUpEnd} {
			if up.T[m] != 0 {
				j[markNames[m]] = up.T[m]
			}
		}
	}
	return j
}

// spread is the median and the 10th and 90th percentiles of vs (nanoseconds), in microseconds.
func spread(vs []int64) Spread {
	if len(vs) == 0 {
		return Spread{}
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	at := func(p float64) float64 {
		return round1(float64(s[min(len(s)-1, int(p*float64(len(s)-1)+0.5))]) / 1e3)
	}
	return Spread{P50: at(0.5), P10: at(0.1), P90: at(0.9)}
}

// steps orders the points that every request has by their median offset from the client's send, and
// returns the time between each two, over the requests.
func steps(reqs []joined) []Step {
	if len(reqs) == 0 {
		return nil
	}
	var names []string
	for name := range reqs[0] {
		all := true
		for _, j := range reqs {
			if _, ok := j[name]; !ok {
				all = false
				break
			}
		}
		if all {
			names = append(names, name)
		}
	}
	median := map[string]float64{}
	for _, name := range names {
		vs := make([]int64, len(reqs))
		for i, j := range reqs {
			vs[i] = j[name] - j[ptSend]
		}
		median[name] = spread(vs).P50
	}
	slices.SortStableFunc(names, func(a, b string) int {
		switch {
		case median[a] < median[b]:
			return -1
		case median[a] > median[b]:
			return 1
		}
		return stepRank(a) - stepRank(b)
	})
	out := make([]Step, 0, len(names))
	for i := 1; i < len(names); i++ {
		vs := make([]int64, len(reqs))
		for k, j := range reqs {
			vs[k] = j[names[i]] - j[names[i-1]]
		}
		out = append(out, Step{From: names[i-1], To: names[i], Spread: spread(vs)})
	}
	return out
}

// stepRank breaks ties between points stamped in the same microsecond, in the order a request
// reaches them.
func stepRank(name string) int {
	order := append([]string{ptSend, "upstream-handler"}, markNames[:]...)
	order = append(order, ptHeaders, ptFirstByte, ptDone)
	if i := slices.Index(order, name); i >= 0 {
		return i
	}
	return len(order)
}

// timelinePass runs the timeline of every selected workload through the three targets.
func (r *runState) timelinePass(ctx context.Context, wls []*workload) ([]TimelineReport, error) {
	var out []TimelineReport
	var seq int64
	for _, w := range wls {
		tr, err := r.timeline(ctx, w, &seq)
		if err != nil {
			return nil, fmt.Errorf("timeline of %s: %w", w.Name, err)
		}
		out = append(out, tr)
	}
	return out, nil
}

// timeline sends cfg.Timeline requests of w to each target, one at a time, one every 1/rate, the
// targets taken in turn (their order rotating), and joins every process's stamps.
func (r *runState) timeline(ctx context.Context, w *workload, seq *int64) (TimelineReport, error) {
	gens := map[string]*generator{}
	for _, t := range targets {
		g := newGenerator(r.server(w, t).URL(), w, 1)
		defer g.close()
		gens[t] = g
	}
	buf := make([]byte, 32<<10)
	for _, t := range targets {
		for range timelineWarmup {
			if _, err := gens[t].timed(ctx, -1, buf); err != nil {
				return TimelineReport{}, fmt.Errorf("%s warm-up: %w", t, err)
			}
		}
	}
	// The warm-up requests carry sequence -1: drop their stamps.
	for _, c := range []*child{r.upstream, r.baseline, r.promptgate[w.Plugins]} {
		if _, err := r.marks(ctx, c); err != nil {
			return TimelineReport{}, err
		}
	}
	interval := time.Second / time.Duration(r.cfg.Rate)
	n := r.cfg.Timeline
	var captures sync.WaitGroup
	if r.cfg.TraceDir != "" {
		secs := int((time.Duration(n*len(targets))*interval)/time.Second) + 2
		r.capture(ctx, &captures, w, secs)
	}
	before := map[string]serverStats{}
	for _, t := range []string{targetBaseline, targetPromptgate} {
		st, err := r.serverStats(ctx, r.server(w, t))
		if err != nil {
			return TimelineReport{}, err
		}
		st.SysReads, st.SysWrites = procIO(r.server(w, t).cmd.Process.Pid)
		before[t] = st
	}
	client := map[string]map[int64]clientMarks{}
	errs := map[string]int{}
	for _, t := range targets {
		client[t] = map[int64]clientMarks{}
	}
	next := time.Now()
	for i := range n {
		for k := range targets {
			t := targets[(i+k)%len(targets)]
			if d := time.Until(next); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return TimelineReport{}, ctx.Err()
				}
			}
			next = next.Add(interval)
			*seq++
			c, err := gens[t].timed(ctx, *seq, buf)
			if err != nil {
				errs[t]++
				continue
			}
			client[t][*seq] = c
		}
	}
	after := map[string]serverStats{}
	for _, t := range []string{targetBaseline, targetPromptgate} {
		st, err := r.serverStats(ctx, r.server(w, t))
		if err != nil {
			return TimelineReport{}, err
		}
		st.SysReads, st.SysWrites = procIO(r.server(w, t).cmd.Process.Pid)
		after[t] = st
	}
	captures.Wait()
	upMarks, err := r.marks(ctx, r.upstream)
	if err != nil {
		return TimelineReport{}, err
	}
	rep := TimelineReport{Workload: w.Name}
	for _, t := range targets {
		var pm map[int64]serverMarks
		if t != targetDirect {
			if pm, err = r.marks(ctx, r.server(w, t)); err != nil {
				return TimelineReport{}, err
			}
		}
		var st *[2]serverStats
		if t != targetDirect {
			st = &[2]serverStats{before[t], after[t]}
		}
		rep.Targets = append(rep.Targets, targetTimeline(t, client[t], pm, upMarks, errs[t], st))
	}
	return rep, nil
}

// targetTimeline joins one target's stamps into its timeline; stats are its proxy's counters before
// and after the pass (nil for the direct target).
func targetTimeline(target string, client map[int64]clientMarks, proxy, up map[int64]serverMarks, errs int, stats *[2]serverStats) TargetTimeline {
	tt := TargetTimeline{Target: target, Errors: errs}
	var reqs []joined
	var totals []int64
	var writes, flushes int64
	for seq, c := range client {
		u, ok := up[seq]
		if !ok {
			continue
		}
		var p *serverMarks
		if proxy != nil {
			pm, ok := proxy[seq]
			if !ok {
				continue
			}
			p = &pm
			writes += pm.Writes
			flushes += pm.Flushes
		}
		reqs = append(reqs, join(c, p, &u))
		totals = append(totals, c.done-c.send)
	}
	tt.Requests = len(reqs)
	tt.TotalUs = spread(totals)
	tt.Steps = steps(reqs)
	if n := float64(len(client) + errs); stats != nil && n > 0 {
		b, a := stats[0], stats[1]
		tt.CPUUs = round1(float64(a.CPUNs-b.CPUNs) / 1e3 / n)
		tt.VolSwitches = round1(float64(a.VolSwitches-b.VolSwitches) / n)
		tt.InvolSwitches = round1(float64(a.InvolSwitches-b.InvolSwitches) / n)
		tt.Goroutines = round1(float64(a.GoroutinesCreated-b.GoroutinesCreated) / n)
		tt.SysReads = round1(float64(a.SysReads-b.SysReads) / n)
		tt.SysWrites = round1(float64(a.SysWrites-b.SysWrites) / n)
		tt.PageFaults = round1(float64(a.MinorFaults-b.MinorFaults) / n)
		tt.GCsPer100 = round1(float64(a.NumGC-b.NumGC) * 100 / n)
	}
	if len(reqs) > 0 && proxy != nil {
		tt.ClientWrites = round1(float64(writes) / float64(len(reqs)))
		tt.Flushes = round1(float64(flushes) / float64(len(reqs)))
	}
	return tt
}

// marks takes the stamps a child kept.
func (r *runState) marks(ctx context.Context, c *child) (map[int64]serverMarks, error) {
	b, err := r.get(ctx, c, "/marks")
	if err != nil {
		return nil, err
	}
	var m map[int64]serverMarks
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s marks: %w", c.name, err)
	}
	return m, nil
}

// capture takes, from both proxies, an execution trace and the block and mutex profiles over secs
// seconds (the whole timeline of w), in the background; wg is done when all are written.
func (r *runState) capture(ctx context.Context, wg *sync.WaitGroup, w *workload, secs int) {
	for _, t := range []string{targetBaseline, targetPromptgate} {
		c := r.server(w, t)
		for _, p := range []struct{ path, file string }{
			{"/debug/pprof/trace?seconds=", "trace"},
			{"/debug/pprof/block?seconds=", "block.pprof"},
			{"/debug/pprof/mutex?seconds=", "mutex.pprof"},
		} {
			file := filepath.Join(r.cfg.TraceDir, w.Name+"-"+t+"-"+p.file)
			wg.Go(func() {
				if err := r.fetch(ctx, c, p.path+strconv.Itoa(secs), file); err != nil {
					fmt.Fprintf(r.progress, "%s: %v\n", file, err)
				}
			})
		}
	}
	// The trace starts when its request arrives: give the three requests a moment.
	time.Sleep(100 * time.Millisecond)
}

// printTimelines writes each workload's timeline, the targets side by side.
func printTimelines(w io.Writer, tls []TimelineReport) {
	for _, tl := range tls {
		fmt.Fprintf(w, "\ntimeline of %s: one request at a time; µs between stamped points, median [p10–p90] over the requests\n", tl.Workload)
		for _, t := range tl.Targets {
			fmt.Fprintf(w, "\n  %s: %d requests (%d errors), client send → done %.1f µs [%.1f–%.1f]\n", t.Target, t.Requests, t.Errors,
				t.TotalUs.P50, t.TotalUs.P10, t.TotalUs.P90)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			for _, s := range t.Steps {
				fmt.Fprintf(tw, "    %s → %s\t%.1f\t[%.1f–%.1f]\t\n", s.From, s.To, s.P50, s.P10, s.P90)
			}
			tw.Flush()
			if t.Target != targetDirect {
				fmt.Fprintf(w, "    per request: CPU %.1f µs, voluntary switches %.2f, involuntary %.2f, goroutines created %.2f, read syscalls %.1f, write syscalls %.1f, writes to the client %.1f, flushes %.1f, page faults %.1f, GCs per 100 requests %.1f\n",
					t.CPUUs, t.VolSwitches, t.InvolSwitches, t.Goroutines, t.SysReads, t.SysWrites, t.ClientWrites, t.Flushes, t.PageFaults, t.GCsPer100)
			}
		}
	}
}
