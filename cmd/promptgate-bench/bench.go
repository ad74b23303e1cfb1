package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Modes and targets of a phase.
const (
	modeRate        = "rate"
	modeSaturation  = "saturation"
	modeConcurrency = "concurrency"

	targetDirect     = "direct"
	targetBaseline   = "baseline"
	targetPromptgate = "promptgate"
)

var targets = []string{targetDirect, targetBaseline, targetPromptgate}

// rssInterval is how often the RSS of the server under load is sampled.
const rssInterval = 50 * time.Millisecond

// runState is the state of one benchmark run: its settings, its folder and its child processes.
type runState struct {
	cfg      Config
	progress io.Writer
	exe, dir string

	upstream, baseline *child
	promptgate         map[int]*child // by plugin count
	// instrument is the timeline's stamping and profiling, given to every child.
	instrument childSpec
	stats      *http.Client
}

// bench starts the servers, checks promptgate's pipeline on every workload, runs every phase and
// returns the report.
func bench(ctx context.Context, cfg Config, progress io.Writer) (*Report, error) {
	wls := selectWorkloads(cfg)
	if len(wls) == 0 {
		return nil, fmt.Errorf("no workload to run")
	}
	modes := cfg.Modes
	if len(modes) == 0 {
		modes = allModes
	}
	nPhases := len(wls) * len(modes) * len(targets) * cfg.Repeat
	perPhase := cfg.Warmup + max(cfg.Duration, cfg.SatDuration) + 500*time.Millisecond
	budget := time.Duration(nPhases)*perPhase + cfg.Soak + 2*time.Minute
	if cfg.Timeline > 0 {
		nPhases = 0
		perRequest := time.Second/time.Duration(cfg.Rate) + time.Millisecond
		budget = time.Duration(len(wls)*len(targets)*(cfg.Timeline+timelineWarmup))*perRequest + 2*time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, 2*budget)
	defer cancel()

	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "promptgate-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r := &runState{cfg: cfg, progress: progress, exe: exe, dir: dir, promptgate: map[int]*child{},
		stats:      &http.Client{Timeout: 10 * time.Second},
		instrument: childSpec{Timeline: cfg.Timeline > 0, Profile: cfg.TraceDir != ""}}
	defer r.stopAll()
	fmt.Fprintf(progress, "starting servers (%d workloads, %d phases, at most %s)\n", len(wls), nPhases, (2 * budget).Round(time.Second))
	if err := r.startServers(ctx, wls, 2*budget+time.Minute); err != nil {
		return nil, err
	}

	rep := newReport(cfg)
	if !cfg.Plugins {
		rep.Plugins.Note = "plugin workloads switched off (--plugins=false)"
	} else if !pluginsAvailable {
		rep.Plugins.Note = pluginsNote
	}
	rep.Plugins.Enabled = cfg.Plugins && pluginsAvailable
	for _, w := range wls {
		if err := r.check(ctx, w); err != nil {
			return nil, fmt.Errorf("workload %s: promptgate's pipeline check failed: %w", w.Name, err)
		}
	}
	fmt.Fprintf(progress, "pipeline checked on every workload\n")
	if cfg.Timeline > 0 {
		if rep.Timelines, err = r.timelinePass(ctx, wls); err != nil {
			return nil, err
		}
		rep.LoadAvgEnd = loadAvg()
		return rep, nil
	}

	runs := map[string][]Result{} // key workload/mode/target
	i := 0
	for _, w := range wls {
		for round := range cfg.Repeat {
			for _, mode := range modes {
				for _, t := range targets {
					i++
					res, err := r.phase(ctx, w, mode, t, round)
					if err != nil {
						return nil, err
					}
					fmt.Fprintf(progress, "[%d/%d] %-11s %-10s %-10s %s\n", i, nPhases, w.Name, mode, t, res.brief())
					k := w.Name + "/" + mode + "/" + t
					runs[k] = append(runs[k], res)
				}
			}
		}
	}
	for _, w := range wls {
		wr := WorkloadReport{Name: w.Name, Desc: w.Desc, RequestBytes: len(w.Body), Stream: w.Stream(), Plugins: w.Plugins}
		for _, mode := range modes {
			for _, t := range targets {
				wr.Results = append(wr.Results, medianResult(runs[w.Name+"/"+mode+"/"+t]))
			}
		}
		wr.Overhead = overhead(wr, cfg)
		rep.Workloads = append(rep.Workloads, wr)
	}
	if cfg.PprofDir != "" {
		if err := r.fetch(ctx, r.promptgate[0], "/debug/pprof/allocs", filepath.Join(cfg.PprofDir, "allocs-promptgate.pprof")); err != nil {
			fmt.Fprintf(progress, "allocation profile: %v\n", err)
		}
	}
	if cfg.Soak > 0 {
		s, err := r.soak(ctx)
		if err != nil {
			return nil, err
		}
		rep.Soak = s
	}
	rep.LoadAvgEnd = loadAvg()
	return rep, nil
}

// selectWorkloads is the workloads the flags ask for, without the plugin ones when plugins are off.
func selectWorkloads(cfg Config) []*workload {
	var out []*workload
	for _, w := range workloads() {
		if len(cfg.Workloads) > 0 && !slices.Contains(cfg.Workloads, w.Name) {
			continue
		}
		if w.Plugins > 0 && (!cfg.Plugins || !pluginsAvailable) {
			continue
		}
		out = append(out, w)
	}
	return out
}

func (r *runState) startServers(ctx context.Context, wls []*workload, lifetime time.Duration) error {
	var err error
	r.upstream, err = startChild(ctx, r.exe, "upstream", childSpec{Role: roleUpstream, Dir: r.dir,
		RespBytes: r.cfg.RespBytes, Chunks: r.cfg.Chunks, ChunkDelay: r.cfg.ChunkDelay, Lifetime: lifetime,
		Timeline: r.instrument.Timeline}, nil, r.progress)
	if err != nil {
		return err
	}
	r.baseline, err = startChild(ctx, r.exe, "baseline", childSpec{Role: roleBaseline, Dir: r.dir, Upstream: r.upstream.URL(), Lifetime: lifetime,
		Timeline: r.instrument.Timeline, Profile: r.instrument.Profile}, nil, r.progress)
	if err != nil {
		return err
	}
	for _, w := range wls {
		if r.promptgate[w.Plugins] != nil {
			continue
		}
		name := "promptgate"
		if w.Plugins > 0 {
			name += "+" + strconv.Itoa(w.Plugins) + "plugins"
		}
		d := filepath.Join(r.dir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			return err
		}
		c, err := startChild(ctx, r.exe, name, childSpec{Role: rolePromptgate, Dir: d, Upstream: r.upstream.URL(), Plugins: w.Plugins, Lifetime: lifetime,
			Timeline: r.instrument.Timeline, Profile: r.instrument.Profile}, r.cfg.PromptgateEnv, r.progress)
		if err != nil {
			return err
		}
		r.promptgate[w.Plugins] = c
	}
	return nil
}

func (r *runState) stopAll() {
	var wg sync.WaitGroup
	for _, c := range r.promptgate {
		wg.Go(c.stop)
	}
	if r.baseline != nil {
		wg.Go(r.baseline.stop)
	}
	wg.Wait()
	if r.upstream != nil {
		r.upstream.stop()
	}
}

// server is the process that answers a target's requests.
func (r *runState) server(w *workload, target string) *child {
	switch target {
	case targetDirect:
		return r.upstream
	case targetBaseline:
		return r.baseline
	}
	return r.promptgate[w.Plugins]
}

// check sends one request of w through every target and verifies promptgate's rewrite of it.
func (r *runState) check(ctx context.Context, w *workload) error {
	for _, t := range targets {
		g := newGenerator(r.server(w, t).URL(), w, 1)
		h, body, err := g.once(ctx)
		g.close()
		if err != nil {
			return fmt.Errorf("%s: %w", t, err)
		}
		if t != targetPromptgate {
			continue
		}
		up, err := r.get(ctx, r.upstream, "/last")
		if err != nil {
			return err
		}
		if err := w.check(up, h, body); err != nil {
			return err
		}
	}
	return nil
}

// phase runs one measured phase: a warm-up, then the load, with the server's runtime counters read
// before and after and its RSS sampled during.
func (r *runState) phase(ctx context.Context, w *workload, mode, target string, round int) (Result, error) {
	srv := r.server(w, target)
	conns := r.cfg.Conns
	switch mode {
	case modeRate:
		conns = r.cfg.OpenWorkers
	case modeConcurrency:
		conns = r.cfg.Concurrency
	}
	g := newGenerator(srv.URL(), w, conns)
	defer g.close()
	load := func(d time.Duration) loadResult {
		if mode == modeRate {
			return g.openLoop(ctx, r.cfg.Rate, d, r.cfg.OpenWorkers)
		}
		return g.closedLoop(ctx, conns, d, maxPhaseRequests)
	}
	if r.cfg.Warmup > 0 {
		load(r.cfg.Warmup)
	}
	runtime.GC() // the generator's own garbage from the warm-up is not collected during the phase
	before, err := r.serverStats(ctx, srv)
	if err != nil {
		return Result{}, err
	}
	d := r.cfg.Duration
	if mode == modeSaturation {
		d = r.cfg.SatDuration
	}
	var profile sync.WaitGroup
	if r.cfg.PprofDir != "" && target == targetPromptgate && mode == modeSaturation && round == 0 && d >= time.Second {
		secs := int(d / time.Second)
		file := filepath.Join(r.cfg.PprofDir, "cpu-"+w.Name+".pprof")
		profile.Go(func() {
			if err := r.fetch(ctx, srv, "/debug/pprof/profile?seconds="+strconv.Itoa(secs), file); err != nil {
				fmt.Fprintf(r.progress, "cpu profile of %s: %v\n", w.Name, err)
			}
		})
	}
	pid := srv.cmd.Process.Pid
	peak := newRSSSampler(pid)
	before.SysReads, before.SysWrites = procIO(pid)
	res := load(d)
	peakRSS := peak.stop()
	profile.Wait()
	reads, writes := procIO(pid)
	after, err := r.serverStats(ctx, srv)
	if err != nil {
		return Result{}, err
	}
	after.SysReads, after.SysWrites = reads, writes
	peakRSS = max(peakRSS, after.RSS)
	return newResult(mode, target, conns, r.cfg.Rate, res, before, after, peakRSS), ctx.Err()
}

// rssSampler keeps the highest RSS of a process seen while it runs.
type rssSampler struct {
	done chan struct{}
	peak chan uint64
}

func newRSSSampler(pid int) *rssSampler {
	s := &rssSampler{done: make(chan struct{}), peak: make(chan uint64, 1)}
	go func() {
		t := time.NewTicker(rssInterval)
		defer t.Stop()
		var peak uint64
		for {
			rss, _ := procRSS(pid)
			peak = max(peak, rss)
			select {
			case <-s.done:
				s.peak <- peak
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) stop() uint64 {
	close(s.done)
	return <-s.peak
}

func (r *runState) serverStats(ctx context.Context, c *child) (serverStats, error) {
	b, err := r.get(ctx, c, "/stats")
	if err != nil {
		return serverStats{}, err
	}
	var s serverStats
	if err := json.Unmarshal(b, &s); err != nil {
		return serverStats{}, fmt.Errorf("%s stats: %w", c.name, err)
	}
	return s, nil
}

// get reads a control endpoint of a child.
func (r *runState) get(ctx context.Context, c *child, path string) ([]byte, error) {
	return getControl(ctx, r.stats, c, path)
}

func getControl(ctx context.Context, client *http.Client, c *child, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.ready.Control+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.name, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.name, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: status %d", c.name, path, resp.StatusCode)
	}
	return b, nil
}

// fetch saves a control endpoint's answer (a profile) to file.
func (r *runState) fetch(ctx context.Context, c *child, path, file string) error {
	// A CPU profile takes as long as it asks for.
	b, err := getControl(ctx, &http.Client{Timeout: 10 * time.Minute}, c, path)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// soak runs the 8 KB workload at saturation against promptgate for cfg.Soak, sampling its RSS each
// second.
func (r *runState) soak(ctx context.Context) (*SoakReport, error) {
	var w *workload
	for _, x := range workloads() {
		if x.Name == wlChat8K {
			w = x
		}
	}
	srv := r.promptgate[0]
	if srv == nil {
		d := filepath.Join(r.dir, "promptgate-soak")
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
		c, err := startChild(ctx, r.exe, "promptgate", childSpec{Role: rolePromptgate, Dir: d, Upstream: r.upstream.URL(), Lifetime: r.cfg.Soak + 2*time.Minute}, r.cfg.PromptgateEnv, r.progress)
		if err != nil {
			return nil, err
		}
		r.promptgate[0] = c
		srv = c
	}
	fmt.Fprintf(r.progress, "soak: %s of %s at saturation (%d conns) against promptgate\n", r.cfg.Soak, w.Name, r.cfg.Conns)
	g := newGenerator(srv.URL(), w, r.cfg.Conns)
	defer g.close()
	s := &SoakReport{Workload: w.Name, Conns: r.cfg.Conns, Duration: r.cfg.Soak.String()}
	done := make(chan loadResult, 1)
	go func() { done <- g.closedLoop(ctx, r.cfg.Conns, r.cfg.Soak, maxPhaseRequests) }()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case res := <-done:
			s.Requests, s.Errors = len(res.samples), res.errors
			st, err := r.serverStats(ctx, srv)
			if err != nil {
				return nil, err
			}
			s.PeakRSSMB = mb(st.PeakRSS)
			s.HeapInuseMB = mb(st.HeapInuse)
			return s, nil
		case <-t.C:
			rss, _ := procRSS(srv.cmd.Process.Pid)
			s.RSSMB = append(s.RSSMB, mb(rss))
			if n := len(s.RSSMB); n%10 == 0 {
				fmt.Fprintf(r.progress, "soak: %s, RSS %.1f MB\n", time.Since(start).Round(time.Second), s.RSSMB[n-1])
			}
		}
	}
}

// parseRoot parses a server's root URL.
func parseRoot(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("bad upstream URL %q", s)
	}
	return u, nil
}
