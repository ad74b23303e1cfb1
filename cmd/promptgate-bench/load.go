package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// requestTimeout bounds one request of the load generator.
const requestTimeout = 30 * time.Second

// sample is one request's outcome: latency and time to first byte, both from the request's start
// (its scheduled time in an open loop).
type sample struct {
	lat, ttfb time.Duration
}

// loadResult is what one phase measured.
type loadResult struct {
	samples  []sample
	errors   int
	firstErr string
	elapsed  time.Duration
}

// generator sends one workload's requests to one target. It allocates little per request and
// nothing per byte, so that it leaves the machine's cores to the servers.
type generator struct {
	url    string
	w      *workload
	client *http.Client
	tr     *http.Transport
}

func newGenerator(url string, w *workload, conns int) *generator {
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        0,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &generator{url: url + w.path(), w: w, tr: tr, client: &http.Client{Transport: tr, Timeout: requestTimeout}}
}

func (g *generator) close() { g.tr.CloseIdleConnections() }

// do sends one request and reads the whole answer into buf, in pieces. t0 is when the request
// counts as started.
func (g *generator) do(ctx context.Context, t0 time.Time, buf []byte) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(g.w.Body))
	if err != nil {
		return sample{}, err
	}
	req.Header = http.Header{
		"Content-Type":  {"application/json"},
		"Authorization": {"Bearer sk-bench"},
		HeaderShape:     {g.w.Shape},
	}
	resp, err := g.client.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	var s sample
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 && s.ttfb == 0 {
			s.ttfb = time.Since(t0)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sample{}, err
		}
	}
	s.lat = time.Since(t0)
	if resp.StatusCode != http.StatusOK {
		return sample{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	return s, nil
}

// worker collects one goroutine's samples.
type worker struct {
	samples  []sample
	errors   int
	firstErr string
	buf      []byte
}

func (w *worker) record(s sample, err error) {
	if err != nil {
		w.errors++
		if w.firstErr == "" {
			w.firstErr = err.Error()
		}
		return
	}
	w.samples = append(w.samples, s)
}

func merge(ws []*worker, elapsed time.Duration) loadResult {
	r := loadResult{elapsed: elapsed}
	for _, w := range ws {
		r.samples = append(r.samples, w.samples...)
		r.errors += w.errors
		if r.firstErr == "" {
			r.firstErr = w.firstErr
		}
	}
	return r
}

// openLoop sends rate requests per second for d: request i is scheduled at start + i/rate, whatever
// happened to the others, and its latency counts from that time, so a server that falls behind
// shows it in the latency instead of slowing the sender down (no coordinated omission). At most
// workers requests are in flight; a scheduled request that finds them all busy waits, and its wait
// counts.
func (g *generator) openLoop(ctx context.Context, rate int, d time.Duration, workers int) loadResult {
	n := max(1, int(float64(rate)*d.Seconds()))
	interval := time.Second / time.Duration(rate)
	jobs := make(chan time.Time, n)
	ws := make([]*worker, workers)
	var wg sync.WaitGroup
	for i := range ws {
		w := &worker{buf: make([]byte, 32<<10), samples: make([]sample, 0, n/workers+1)}
		ws[i] = w
		wg.Go(func() {
			for t0 := range jobs {
				if ctx.Err() != nil {
					w.record(sample{}, ctx.Err())
					continue
				}
				w.record(g.do(ctx, t0, w.buf))
			}
		})
	}
	start := time.Now()
	timer := time.NewTimer(0)
	<-timer.C
	for i := 0; i < n && ctx.Err() == nil; i++ {
		t := start.Add(time.Duration(i) * interval)
		if wait := time.Until(t); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
		}
		jobs <- t
	}
	close(jobs)
	wg.Wait()
	return merge(ws, time.Since(start))
}

// closedLoop keeps conns requests in flight, each worker sending its next request as soon as the
// answer to its last one is complete (read to its end), for d and at most budget requests. Latency
// counts from each request's send.
func (g *generator) closedLoop(ctx context.Context, conns int, d time.Duration, budget int) loadResult {
	ws := make([]*worker, conns)
	var wg sync.WaitGroup
	var mu sync.Mutex
	take := func() bool {
		mu.Lock()
		defer mu.Unlock()
		budget--
		return budget >= 0
	}
	start := time.Now()
	end := start.Add(d)
	for i := range ws {
		w := &worker{buf: make([]byte, 32<<10), samples: make([]sample, 0, 1024)}
		ws[i] = w
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(end) && take() {
				w.record(g.do(ctx, time.Now(), w.buf))
			}
		})
	}
	wg.Wait()
	return merge(ws, time.Since(start))
}

// once sends one request with HeaderCapture set and returns the answer's header and body.
func (g *generator) once(ctx context.Context) (http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, bytes.NewReader(g.w.Body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-bench")
	req.Header.Set(HeaderShape, g.w.Shape)
	req.Header.Set(HeaderCapture, "1")
	resp, err := g.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("status %d: %.300s", resp.StatusCode, body)
	}
	return resp.Header, body, nil
}
