package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestClosedLoopConcurrency checks the fixed-concurrency load: exactly n requests in flight (never
// more, and all n at once), a client's next request only once its last answer is complete, every
// answer counted once (a sample or an error), and the request budget kept.
func TestClosedLoopConcurrency(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			var inFlight, most, served, barrierMissed atomic.Int64
			reached := make(chan struct{})
			var once sync.Once
			var conns atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				k := inFlight.Add(1)
				defer inFlight.Add(-1)
				for m := most.Load(); k > m && !most.CompareAndSwap(m, k); m = most.Load() {
				}
				if k == int64(n) {
					once.Do(func() { close(reached) })
				}
				num := served.Add(1)
				if num%5 == 0 {
					http.Error(w, "no", http.StatusInternalServerError)
					return
				}
				// The first part of the answer, then the rest only once every client has a request
				// in flight: a client that sent its next request before reading this answer's end
				// would be one request too many.
				_, _ = w.Write([]byte(`{"part":1,`))
				http.NewResponseController(w).Flush()
				select {
				case <-reached:
				case <-r.Context().Done():
					return
				case <-time.After(20 * time.Second):
					barrierMissed.Add(1)
				}
				_, _ = w.Write([]byte(`"part2":true}`))
			}))
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Start()
			defer srv.Close()
			g := newGenerator(srv.URL, &workload{Name: "t", Body: []byte(`{}`), Shape: shapeJSON}, n)
			defer g.close()
			const budget = 40
			res := g.closedLoop(context.Background(), n, time.Hour, budget)
			if got := most.Load(); got != int64(n) {
				t.Errorf("%d requests in flight at most, want %d", got, n)
			}
			// Each client keeps its connection: one more client, or a client that moved on before
			// the end of an answer, would need a connection of its own. Go's transport drops a
			// connection whose request write it has not seen confirmed within 50 ms of the answer's
			// end, which a machine under load (the race detector, parallel packages) can cause now
			// and then: two such are allowed.
			if got := conns.Load(); got < int64(n) || got > int64(n)+2 {
				t.Errorf("%d connections, want one per client (%d)", got, n)
			}
			if barrierMissed.Load() > 0 {
				t.Errorf("%d answers waited in vain for %d clients at once", barrierMissed.Load(), n)
			}
			if got := served.Load(); got != budget {
				t.Errorf("%d requests served, want the budget %d", got, budget)
			}
			if len(res.samples)+res.errors != budget || res.errors != budget/5 {
				t.Errorf("%d samples and %d errors, want %d and %d", len(res.samples), res.errors, budget-budget/5, budget/5)
			}
			if !strings.Contains(res.firstErr, "500") {
				t.Errorf("first error %q, want the status", res.firstErr)
			}
			for _, s := range res.samples {
				if s.ttfb <= 0 || s.ttfb > s.lat {
					t.Fatalf("sample %+v: time to first byte must be within the latency", s)
				}
			}
			if res.elapsed <= 0 {
				t.Errorf("elapsed %v", res.elapsed)
			}
		})
	}
}

// TestConcurrencyOverhead checks the ratios and goals of the fixed-concurrency phase.
func TestConcurrencyOverhead(t *testing.T) {
	t.Parallel()
	res := func(mode, target string, p50, p99, ttfb, tput float64) Result {
		return Result{Mode: mode, Target: target, Requests: 100, Conns: 8, P50Ms: p50, P99Ms: p99, TTFBP50Ms: ttfb, Throughput: tput}
	}
	wr := WorkloadReport{Name: "w", Stream: true, Results: []Result{
		res(modeConcurrency, targetDirect, 1.0, 2.0, 0.5, 2000),
		res(modeConcurrency, targetBaseline, 1.2, 3.0, 0.6, 1000),
		res(modeConcurrency, targetPromptgate, 1.3, 5.0, 1.0, 900),
	}}
	o := overhead(wr, Config{Conns: 16})
	c := o.Concurrency
	if c == nil {
		t.Fatal("no concurrency comparison")
	}
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	check("p50 ratio", c.P50Ratio, 1.5)
	check("p99 ratio", c.P99Ratio, 3)
	check("TTFB delta", c.TTFBDeltaMs, 0.4)
	check("throughput ratio", c.ThroughputRatio, 0.9)
	if c.Clients != 8 || c.AddedP50Ms != 0.3 || c.BaselineAddedP50Ms != 0.2 {
		t.Errorf("comparison %+v", c)
	}
	met := map[string]bool{}
	for _, g := range o.Goals {
		met[g.Name] = g.Met
	}
	want := map[string]bool{
		"concurrency p50 overhead ratio <= 1.5":   true,
		"concurrency p99 overhead ratio <= 2":     false,
		"concurrency stream TTFB delta <= 0.3 ms": false,
		"concurrency throughput ratio >= 0.8":     true,
	}
	for name, w := range want {
		if got, ok := met[name]; !ok || got != w {
			t.Errorf("goal %q: met %v (present %v), want %v", name, got, ok, w)
		}
	}
	// Without the phase, no comparison and no goal of it.
	wr.Results = []Result{res(modeRate, targetDirect, 1, 2, 0, 100)}
	if o := overhead(wr, Config{}); o.Concurrency != nil || len(o.Goals) != 0 {
		t.Errorf("without the phase: %+v", o)
	}
}

// TestTimelineSteps checks how stamps from three processes become a timeline: requests joined by
// their sequence number, those a server did not stamp left out, points ordered by their median
// offset, and the per-request counters.
func TestTimelineSteps(t *testing.T) {
	t.Parallel()
	const us = int64(time.Microsecond)
	client := map[int64]clientMarks{}
	proxy := map[int64]serverMarks{}
	up := map[int64]serverMarks{}
	for seq := int64(1); seq <= 5; seq++ {
		base := seq * 1_000_000 * us
		client[seq] = clientMarks{send: base, headers: base + 90*us, firstByte: base + 95*us, done: base + 100*us}
		var p serverMarks
		p.T[mStart] = base + 10*us
		p.T[mBodyFirst] = base + 12*us
		p.T[mBodyEOF] = base + 15*us
		p.T[mRTStart] = base + (20+seq)*us // prepare takes 5+seq µs
		p.T[mRTHeaders] = base + 60*us
		p.T[mRespFirst] = base + 61*us
		p.T[mRespEOF] = base + 62*us
		p.T[mWriteHeader] = base + 63*us
		p.T[mFirstWrite] = base + 64*us
		p.T[mLastWrite] = base + 65*us
		p.T[mEnd] = base + 70*us
		p.Writes, p.Flushes = 1, 2
		proxy[seq] = p
		var u serverMarks
		u.T[mStart] = base + 30*us
		u.T[mUpBodyEOF] = base + 31*us
		u.T[mUpEnd] = base + 40*us
		up[seq] = u
	}
	client[6] = clientMarks{send: 1, headers: 2, done: 3} // the proxy never stamped it
	stats := &[2]serverStats{{CPUNs: 1000, VolSwitches: 10, GoroutinesCreated: 3}, {CPUNs: 1000 + 6*50_000, VolSwitches: 10 + 6*4, GoroutinesCreated: 3 + 12}}
	tt := targetTimeline(targetBaseline, client, proxy, up, 0, stats)
	if tt.Requests != 5 {
		t.Fatalf("%d requests joined, want 5", tt.Requests)
	}
	var order []string
	for i, s := range tt.Steps {
		if i == 0 {
			order = append(order, s.From)
		}
		order = append(order, s.To)
	}
	want := []string{ptSend, "handler", "body-read-start", "body-in", "upstream-call", "upstream-handler", "upstream-body-in",
		"upstream-answered", "upstream-headers-back", "answer-first-bytes", "answer-in", "client-status", "client-first-write",
		"client-last-write", "handler-returned", ptHeaders, ptFirstByte, ptDone}
	if !slices.Equal(order, want) {
		t.Fatalf("points in the order\n%v\nwant\n%v", order, want)
	}
	prep := tt.Steps[3]
	if prep.From != "body-in" || prep.P50 != 8 || prep.P10 != 6 || prep.P90 != 10 {
		t.Errorf("prepare step %+v, want median 8 µs, 6 to 10", prep)
	}
	if tt.TotalUs.P50 != 100 {
		t.Errorf("total %+v", tt.TotalUs)
	}
	if tt.CPUUs != 50 || tt.VolSwitches != 4 || tt.Goroutines != 2 || tt.ClientWrites != 1 || tt.Flushes != 2 {
		t.Errorf("per request: %+v", tt)
	}
	// The direct target: the client's and the upstream's points only.
	direct := targetTimeline(targetDirect, client, nil, up, 1, nil)
	if direct.Requests != 5 || direct.Errors != 1 || len(direct.Steps) != 6 || direct.CPUUs != 0 {
		t.Errorf("direct: %+v", direct)
	}
}

// TestStampedProxy runs the bare proxy between stamped wrappers, as a timeline run does, and checks
// that every point is stamped once, in the order a request reaches it, that an unmarked request is
// not stamped, and that the wrapped writer still reaches the connection's deadlines and flushes.
func TestStampedProxy(t *testing.T) {
	t.Parallel()
	upBook, pBook := newMarkBook(), newMarkBook()
	upstream := httptest.NewServer(upBook.wrapUpstream(newFakeUpstream(1024, 20, 0)))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	var deadlineErrs atomic.Int64
	base := newBaseline(u, markedTransport{next: http.DefaultTransport.(*http.Transport).Clone()})
	px := httptest.NewServer(pBook.wrapProxy(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if http.NewResponseController(w).SetReadDeadline(time.Now().Add(time.Minute)) != nil {
			deadlineErrs.Add(1)
		}
		base.ServeHTTP(w, r)
	})))
	defer px.Close()
	for _, shape := range []string{shapeJSON, shapeSSE} {
		g := newGenerator(px.URL, &workload{Name: "t", Body: chat2KBody(shape != shapeJSON), Shape: shape}, 1)
		c, err := g.timed(context.Background(), 7, make([]byte, 512))
		g.close()
		if err != nil {
			t.Fatal(err)
		}
		if deadlineErrs.Load() > 0 {
			t.Errorf("%s: the wrapped writer hides the connection's deadlines", shape)
		}
		if !(c.send < c.headers && c.headers <= c.firstByte && c.firstByte <= c.done) {
			t.Errorf("%s: client stamps %+v", shape, c)
		}
		pm, um := pBook.take(), upBook.take()
		p, ok := pm[7]
		if !ok || len(pm) != 1 {
			t.Fatalf("%s: proxy stamps %v", shape, pm)
		}
		for _, chain := range [][]mark{
			{mStart, mBodyFirst, mBodyEOF, mRTStart, mRTHeaders, mRespFirst, mRespEOF, mEnd},
			{mRTHeaders, mWriteHeader, mFirstWrite, mLastWrite, mEnd},
		} {
			for i, m := range chain {
				if p.T[m] == 0 || (i > 0 && p.T[m] < p.T[chain[i-1]]) {
					t.Errorf("%s: %s at %d, after %s at %d", shape, markNames[m], p.T[m], markNames[chain[max(i-1, 0)]], p.T[chain[max(i-1, 0)]])
				}
			}
		}
		if p.T[mStart] < c.send || p.T[mEnd] > c.done {
			t.Errorf("%s: the proxy's stamps are outside the client's", shape)
		}
		// The bare proxy is a default ReverseProxy: a stream flushed at every write, an answer of
		// known length written without a flush.
		if p.Writes < 1 || (p.Flushes > 0) != (shape == shapeSSE) {
			t.Errorf("%s: %d writes, %d flushes", shape, p.Writes, p.Flushes)
		}
		// A stream's headers come back before the upstream's handler returns; its end before the
		// answer's end.
		up, answered := um[7], p.T[mRTHeaders]
		if shape != shapeJSON {
			answered = p.T[mRespEOF]
		}
		if !(p.T[mRTStart] <= up.T[mStart] && up.T[mStart] <= up.T[mUpBodyEOF] && up.T[mUpBodyEOF] <= up.T[mUpEnd] && up.T[mUpEnd] <= answered) {
			t.Errorf("%s: upstream stamps %v, the proxy's call %d, its answer %d", shape, up.T, p.T[mRTStart], answered)
		}
	}
	// A request without the sequence header is not stamped.
	g := newGenerator(px.URL, &workload{Name: "t", Body: []byte(`{}`), Shape: shapeJSON}, 1)
	defer g.close()
	if _, err := g.do(context.Background(), time.Now(), make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	if pm, um := pBook.take(), upBook.take(); len(pm)+len(um) != 0 {
		t.Errorf("unmarked request stamped: %v %v", pm, um)
	}
}

// TestCPURatio checks the CPU per request ratio of the saturation phase and its goal (issue 34:
// at most 1.25 times the bare proxy's), and that a phase without CPU figures sets neither.
func TestCPURatio(t *testing.T) {
	t.Parallel()
	res := func(target string, cpu float64) Result {
		return Result{Mode: modeSaturation, Target: target, Requests: 100, Conns: 16, Throughput: 1000, CPUUsPerReq: cpu}
	}
	for _, tc := range []struct {
		base, pg float64
		want     float64
		met      bool
	}{{100, 125, 1.25, true}, {100, 160, 1.6, false}} {
		wr := WorkloadReport{Name: "w", Results: []Result{res(targetBaseline, tc.base), res(targetPromptgate, tc.pg)}}
		o := overhead(wr, Config{})
		if o.CPURatio == nil || *o.CPURatio != tc.want {
			t.Fatalf("%v over %v: ratio %v, want %v", tc.pg, tc.base, o.CPURatio, tc.want)
		}
		found := false
		for _, g := range o.Goals {
			if g.Name == "CPU per request ratio <= 1.25" {
				found = true
				if g.Met != tc.met {
					t.Errorf("%v over %v: met %v, want %v", tc.pg, tc.base, g.Met, tc.met)
				}
			}
		}
		if !found {
			t.Errorf("no CPU goal")
		}
	}
	wr := WorkloadReport{Name: "w", Results: []Result{res(targetBaseline, 0), res(targetPromptgate, 120)}}
	if o := overhead(wr, Config{}); o.CPURatio != nil {
		t.Errorf("without the baseline's CPU figure: ratio %v", *o.CPURatio)
	}
}
