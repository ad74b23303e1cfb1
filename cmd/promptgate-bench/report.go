package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// The goals of issues 8 and 18, measured against the bare reverse proxy of the same run, at the
// fixed rate and again at the fixed concurrency.
const (
	goalP50Ratio        = 1.5  // p50 overhead at most 1.5x the baseline's
	goalP99Ratio        = 2.0  // p99 overhead at most 2x the baseline's
	goalTTFBDeltaMs     = 0.3  // a stream's first byte within 0.3 ms of the baseline's
	goalThroughputRatio = 0.8  // throughput at least 80% of the baseline's (saturation, fixed concurrency)
	goalRSSMB           = 64.0 // resident memory under 64 MB (at 16 connections)
	goalCPURatio        = 1.25 // CPU per request at most 1.25x the baseline's (saturation; issue 34)
)

// Report is the outcome of a run; its JSON is what --json writes.
type Report struct {
	Time    string `json:"time"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	CPUs    int    `json:"cpus"`
	Command string `json:"command"`
	// LoadAvg is the machine's load average (1, 5, 15 minutes) at the start and at the end of the
	// run, from /proc/loadavg: a shared machine shows here.
	LoadAvgStart string         `json:"loadAvgStart,omitempty"`
	LoadAvgEnd   string         `json:"loadAvgEnd,omitempty"`
	Settings     ReportSettings `json:"settings"`
	Plugins      PluginStatus   `json:"plugins"`
	// Workloads holds, per workload, a Result per mode and target, each the median over the
	// repeats.
	Workloads []WorkloadReport `json:"workloads"`
	Soak      *SoakReport      `json:"soak,omitempty"`
	// Timelines is the timeline pass (--timeline), which replaces the load phases.
	Timelines []TimelineReport `json:"timelines,omitempty"`
}

// ReportSettings are the flags of the run.
type ReportSettings struct {
	Rate          int    `json:"rate"`
	Duration      string `json:"duration"`
	SatDuration   string `json:"satDuration"`
	Warmup        string `json:"warmup"`
	Conns         int    `json:"conns"`
	Concurrency   int    `json:"concurrency"`
	OpenWorkers   int    `json:"openWorkers"`
	Repeat        int    `json:"repeat"`
	RespBytes     int    `json:"respBytes"`
	Chunks        int    `json:"chunks"`
	ChunkDelay    string `json:"chunkDelay"`
	Quick         bool   `json:"quick"`
	ContextBudget string `json:"contextBudgets"`
	// PromptgateEnv is the extra environment of the promptgate processes (--promptgate-env).
	PromptgateEnv []string `json:"promptgateEnv,omitempty"`
}

// PluginStatus says whether the plugin workloads ran, and why not.
type PluginStatus struct {
	Enabled bool   `json:"enabled"`
	Note    string `json:"note,omitempty"`
}

// WorkloadReport is one workload's figures.
type WorkloadReport struct {
	Name         string    `json:"name"`
	Desc         string    `json:"desc"`
	RequestBytes int       `json:"requestBytes"`
	Stream       bool      `json:"stream"`
	Plugins      int       `json:"plugins"`
	Results      []Result  `json:"results"`
	Overhead     *Overhead `json:"overhead,omitempty"`
}

// Result is one phase: a workload, a mode and a target.
type Result struct {
	Mode   string `json:"mode"`
	Target string `json:"target"`
	// Runs is the number of repeats this is the median of.
	Runs     int    `json:"runs"`
	Requests int    `json:"requests"`
	Errors   int    `json:"errors"`
	FirstErr string `json:"firstError,omitempty"`
	// Rate is the offered rate of an open-loop phase; Conns the connections (clients) of a
	// closed-loop one (the most requests in flight of an open-loop one).
	Rate  int `json:"rate,omitempty"`
	Conns int `json:"conns"`
	// Latencies in milliseconds; in an open loop they count from the scheduled send time.
	P50Ms  float64 `json:"p50Ms"`
	P99Ms  float64 `json:"p99Ms"`
	MeanMs float64 `json:"meanMs"`
	MaxMs  float64 `json:"maxMs"`
	// Throughput is completed requests per second.
	Throughput float64 `json:"throughput"`
	// TTFB is the time to the first byte of the answer's body (streams: the first event).
	TTFBP50Ms float64 `json:"ttfbP50Ms"`
	TTFBP99Ms float64 `json:"ttfbP99Ms"`
	// AllocsPerReq and BytesPerReq are the server process's Go heap allocations per request
	// (runtime MemStats deltas over the phase); the server is the upstream for target direct.
	AllocsPerReq float64 `json:"allocsPerReq"`
	BytesPerReq  float64 `json:"bytesPerReq"`
	GCs          float64 `json:"gcs"`
	// ReadsPerReq and WritesPerReq are the server process's read and write system calls per request
	// (network I/O: a stream relayed one flush per event shows here).
	ReadsPerReq  float64 `json:"readsPerReq"`
	WritesPerReq float64 `json:"writesPerReq"`
	// CPUUsPerReq is the server process's CPU time (user and system) per request, in microseconds;
	// SwitchesPerReq its voluntary context switches per request (a thread that went to sleep
	// waiting); GoroutinesPerReq the goroutines it started per request.
	CPUUsPerReq      float64 `json:"cpuUsPerReq"`
	SwitchesPerReq   float64 `json:"switchesPerReq"`
	GoroutinesPerReq float64 `json:"goroutinesPerReq"`
	// PeakRSSMB is the highest resident set of the server process seen during the phase.
	PeakRSSMB float64 `json:"peakRSSMB"`
}

// Overhead compares promptgate with the baseline on one workload: the ratios of what each adds to
// the upstream's own latency (measured directly), as the issue defines them.
type Overhead struct {
	// AddedP50Ms and AddedP99Ms are what promptgate adds to the direct latency (rate mode);
	// BaselineAddedP50Ms and BaselineAddedP99Ms what the bare proxy adds.
	AddedP50Ms         float64 `json:"addedP50Ms"`
	AddedP99Ms         float64 `json:"addedP99Ms"`
	BaselineAddedP50Ms float64 `json:"baselineAddedP50Ms"`
	BaselineAddedP99Ms float64 `json:"baselineAddedP99Ms"`
	// P50Ratio = (promptgate p50 - direct p50) / (baseline p50 - direct p50); P99Ratio the same at
	// p99. Null when the baseline adds nothing measurable.
	P50Ratio *float64 `json:"p50Ratio"`
	P99Ratio *float64 `json:"p99Ratio"`
	// TTFBDeltaMs is promptgate's p50 time to first byte minus the baseline's (streams, rate mode).
	TTFBDeltaMs *float64 `json:"ttfbDeltaMs,omitempty"`
	// ThroughputRatio is promptgate's throughput at saturation over the baseline's.
	ThroughputRatio *float64 `json:"throughputRatio"`
	// CPURatio is promptgate's CPU time per request at saturation over the baseline's (each server
	// process's user and system time, its collector's included).
	CPURatio *float64 `json:"cpuRatio,omitempty"`
	// PeakRSSMB is promptgate's peak RSS over the workload's phases.
	PeakRSSMB float64 `json:"peakRSSMB"`
	// Concurrency is the same comparison in the fixed-concurrency phase; nil when it did not run.
	Concurrency *ConcurrencyOverhead `json:"concurrency,omitempty"`
	Goals       []Goal               `json:"goals"`
}

// ConcurrencyOverhead compares promptgate with the baseline at a fixed number of closed-loop
// clients: the same ratios as at the fixed rate, and the throughput ratio at that concurrency.
type ConcurrencyOverhead struct {
	Clients            int      `json:"clients"`
	AddedP50Ms         float64  `json:"addedP50Ms"`
	AddedP99Ms         float64  `json:"addedP99Ms"`
	BaselineAddedP50Ms float64  `json:"baselineAddedP50Ms"`
	BaselineAddedP99Ms float64  `json:"baselineAddedP99Ms"`
	P50Ratio           *float64 `json:"p50Ratio"`
	P99Ratio           *float64 `json:"p99Ratio"`
	TTFBDeltaMs        *float64 `json:"ttfbDeltaMs,omitempty"`
	ThroughputRatio    *float64 `json:"throughputRatio"`
}

// Goal is one of the goals checked on one workload.
type Goal struct {
	Name  string   `json:"name"`
	Value *float64 `json:"value"`
	Limit float64  `json:"limit"`
	Met   bool     `json:"met"`
}

// SoakReport is the long run's memory.
type SoakReport struct {
	Workload    string    `json:"workload"`
	Conns       int       `json:"conns"`
	Duration    string    `json:"duration"`
	Requests    int       `json:"requests"`
	Errors      int       `json:"errors"`
	RSSMB       []float64 `json:"rssMBEachSecond"`
	PeakRSSMB   float64   `json:"peakRSSMB"`
	HeapInuseMB float64   `json:"heapInuseMB"`
}

func newReport(cfg Config) *Report {
	return &Report{
		Time: time.Now().UTC().Format(time.RFC3339), Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		CPUs: runtime.NumCPU(), Command: strings.Join(os.Args, " "), LoadAvgStart: loadAvg(),
		Settings: ReportSettings{
			Rate: cfg.Rate, Duration: cfg.Duration.String(), SatDuration: cfg.SatDuration.String(), Warmup: cfg.Warmup.String(),
			Conns: cfg.Conns, Concurrency: cfg.Concurrency, OpenWorkers: cfg.OpenWorkers, Repeat: cfg.Repeat, RespBytes: cfg.RespBytes, Chunks: cfg.Chunks,
			ChunkDelay: cfg.ChunkDelay.String(), Quick: cfg.Quick, ContextBudget: benchBudgets, PromptgateEnv: cfg.PromptgateEnv,
		},
	}
}

// loadAvg is the first three fields of /proc/loadavg, "" where there is none.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func mb(b uint64) float64        { return math.Round(float64(b)/(1<<20)*10) / 10 }

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func newResult(mode, target string, conns, rate int, lr loadResult, before, after serverStats, peakRSS uint64) Result {
	r := Result{Mode: mode, Target: target, Runs: 1, Requests: len(lr.samples), Errors: lr.errors, FirstErr: lr.firstErr, Conns: conns}
	if mode == modeRate {
		r.Rate = rate
	}
	n := len(lr.samples)
	if n > 0 {
		lat := make([]time.Duration, n)
		ttfb := make([]time.Duration, n)
		var sum time.Duration
		for i, s := range lr.samples {
			lat[i], ttfb[i] = s.lat, s.ttfb
			sum += s.lat
		}
		slices.Sort(lat)
		slices.Sort(ttfb)
		r.P50Ms, r.P99Ms, r.MaxMs = ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(lat[n-1])
		r.MeanMs = ms(sum / time.Duration(n))
		r.TTFBP50Ms, r.TTFBP99Ms = ms(percentile(ttfb, 50)), ms(percentile(ttfb, 99))
		if lr.elapsed > 0 {
			r.Throughput = float64(n) / lr.elapsed.Seconds()
		}
	}
	if total := n + lr.errors; total > 0 {
		r.AllocsPerReq = float64(after.Mallocs-before.Mallocs) / float64(total)
		r.BytesPerReq = float64(after.TotalAlloc-before.TotalAlloc) / float64(total)
		r.GCs = float64(after.NumGC - before.NumGC)
		r.CPUUsPerReq = round1(float64(after.CPUNs-before.CPUNs) / 1e3 / float64(total))
		r.SwitchesPerReq = round1(float64(after.VolSwitches-before.VolSwitches) / float64(total))
		r.GoroutinesPerReq = round1(float64(after.GoroutinesCreated-before.GoroutinesCreated) / float64(total))
		if after.SysWrites > 0 {
			r.ReadsPerReq = round1(float64(after.SysReads-before.SysReads) / float64(total))
			r.WritesPerReq = round1(float64(after.SysWrites-before.SysWrites) / float64(total))
		}
	}
	r.PeakRSSMB = mb(peakRSS)
	for _, f := range []*float64{&r.P50Ms, &r.P99Ms, &r.MeanMs, &r.MaxMs, &r.TTFBP50Ms, &r.TTFBP99Ms} {
		*f = round3(*f)
	}
	r.Throughput, r.AllocsPerReq, r.BytesPerReq = math.Round(r.Throughput), math.Round(r.AllocsPerReq), math.Round(r.BytesPerReq)
	return r
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
func round1(f float64) float64 { return math.Round(f*10) / 10 }

// brief is the one-line progress summary of a phase.
func (r Result) brief() string {
	s := fmt.Sprintf("p50 %.3fms p99 %.3fms %6.0f req/s %5.0f allocs/req %6.1f KB/req RSS %.1f MB", r.P50Ms, r.P99Ms,
		r.Throughput, r.AllocsPerReq, r.BytesPerReq/1024, r.PeakRSSMB)
	if r.Errors > 0 {
		s += fmt.Sprintf(" ERRORS %d (%s)", r.Errors, r.FirstErr)
	}
	return s
}

// medianResult is the median of every figure over the repeats of one phase (errors are summed, peak
// RSS is the highest).
func medianResult(rs []Result) Result {
	if len(rs) == 0 {
		return Result{}
	}
	out := rs[0]
	out.Runs = len(rs)
	med := func(get func(Result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = get(r)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	out.P50Ms = med(func(r Result) float64 { return r.P50Ms })
	out.P99Ms = med(func(r Result) float64 { return r.P99Ms })
	out.MeanMs = med(func(r Result) float64 { return r.MeanMs })
	out.MaxMs = med(func(r Result) float64 { return r.MaxMs })
	out.Throughput = med(func(r Result) float64 { return r.Throughput })
	out.TTFBP50Ms = med(func(r Result) float64 { return r.TTFBP50Ms })
	out.TTFBP99Ms = med(func(r Result) float64 { return r.TTFBP99Ms })
	out.AllocsPerReq = med(func(r Result) float64 { return r.AllocsPerReq })
	out.BytesPerReq = med(func(r Result) float64 { return r.BytesPerReq })
	out.GCs = med(func(r Result) float64 { return r.GCs })
	out.ReadsPerReq = med(func(r Result) float64 { return r.ReadsPerReq })
	out.WritesPerReq = med(func(r Result) float64 { return r.WritesPerReq })
	out.CPUUsPerReq = med(func(r Result) float64 { return r.CPUUsPerReq })
	out.SwitchesPerReq = med(func(r Result) float64 { return r.SwitchesPerReq })
	out.GoroutinesPerReq = med(func(r Result) float64 { return r.GoroutinesPerReq })
	out.Requests, out.Errors = 0, 0
	for _, r := range rs {
		out.Requests += r.Requests
		out.Errors += r.Errors
		out.PeakRSSMB = max(out.PeakRSSMB, r.PeakRSSMB)
		if out.FirstErr == "" {
			out.FirstErr = r.FirstErr
		}
	}
	return out
}

func find(rs []Result, mode, target string) (Result, bool) {
	for _, r := range rs {
		if r.Mode == mode && r.Target == target && r.Requests > 0 {
			return r, true
		}
	}
	return Result{}, false
}

func ptr(f float64) *float64 { v := round3(f); return &v }

// ratio is (pg - direct) / (base - direct), or nil when the baseline adds nothing measurable.
func ratio(pg, base, direct float64) *float64 {
	if base-direct < 0.001 {
		return nil
	}
	return ptr((pg - direct) / (base - direct))
}

// overhead computes the ratios of one workload and checks the goals.
func overhead(wr WorkloadReport, cfg Config) *Overhead {
	o := &Overhead{}
	for _, r := range wr.Results {
		if r.Target == targetPromptgate {
			o.PeakRSSMB = max(o.PeakRSSMB, r.PeakRSSMB)
		}
	}
	d, okD := find(wr.Results, modeRate, targetDirect)
	b, okB := find(wr.Results, modeRate, targetBaseline)
	p, okP := find(wr.Results, modeRate, targetPromptgate)
	goal := func(name string, v *float64, limit float64, atMost bool) {
		g := Goal{Name: name, Value: v, Limit: limit}
		if v != nil {
			g.Met = (atMost && *v <= limit) || (!atMost && *v >= limit)
		}
		o.Goals = append(o.Goals, g)
	}
	if okD && okB && okP {
		o.AddedP50Ms, o.AddedP99Ms = round3(p.P50Ms-d.P50Ms), round3(p.P99Ms-d.P99Ms)
		o.BaselineAddedP50Ms, o.BaselineAddedP99Ms = round3(b.P50Ms-d.P50Ms), round3(b.P99Ms-d.P99Ms)
		o.P50Ratio = ratio(p.P50Ms, b.P50Ms, d.P50Ms)
		o.P99Ratio = ratio(p.P99Ms, b.P99Ms, d.P99Ms)
		goal("p50 overhead ratio <= 1.5", o.P50Ratio, goalP50Ratio, true)
		goal("p99 overhead ratio <= 2", o.P99Ratio, goalP99Ratio, true)
		if wr.Stream {
			o.TTFBDeltaMs = ptr(p.TTFBP50Ms - b.TTFBP50Ms)
			goal("stream TTFB delta <= 0.3 ms", o.TTFBDeltaMs, goalTTFBDeltaMs, true)
		}
	}
	bs, okBS := find(wr.Results, modeSaturation, targetBaseline)
	ps, okPS := find(wr.Results, modeSaturation, targetPromptgate)
	if okBS && okPS && bs.Throughput > 0 {
		o.ThroughputRatio = ptr(ps.Throughput / bs.Throughput)
		goal("throughput ratio >= 0.8", o.ThroughputRatio, goalThroughputRatio, false)
	}
	if okBS && okPS && bs.CPUUsPerReq > 0 && ps.CPUUsPerReq > 0 {
		o.CPURatio = ptr(ps.CPUUsPerReq / bs.CPUUsPerReq)
		goal("CPU per request ratio <= 1.25", o.CPURatio, goalCPURatio, true)
	}
	dc, okDC := find(wr.Results, modeConcurrency, targetDirect)
	bc, okBC := find(wr.Results, modeConcurrency, targetBaseline)
	pc, okPC := find(wr.Results, modeConcurrency, targetPromptgate)
	if okDC && okBC && okPC {
		c := &ConcurrencyOverhead{Clients: pc.Conns,
			AddedP50Ms: round3(pc.P50Ms - dc.P50Ms), AddedP99Ms: round3(pc.P99Ms - dc.P99Ms),
			BaselineAddedP50Ms: round3(bc.P50Ms - dc.P50Ms), BaselineAddedP99Ms: round3(bc.P99Ms - dc.P99Ms),
			P50Ratio: ratio(pc.P50Ms, bc.P50Ms, dc.P50Ms), P99Ratio: ratio(pc.P99Ms, bc.P99Ms, dc.P99Ms)}
		goal("concurrency p50 overhead ratio <= 1.5", c.P50Ratio, goalP50Ratio, true)
		goal("concurrency p99 overhead ratio <= 2", c.P99Ratio, goalP99Ratio, true)
		if wr.Stream {
			c.TTFBDeltaMs = ptr(pc.TTFBP50Ms - bc.TTFBP50Ms)
			goal("concurrency stream TTFB delta <= 0.3 ms", c.TTFBDeltaMs, goalTTFBDeltaMs, true)
		}
		if bc.Throughput > 0 {
			c.ThroughputRatio = ptr(pc.Throughput / bc.Throughput)
			goal("concurrency throughput ratio >= 0.8", c.ThroughputRatio, goalThroughputRatio, false)
		}
		o.Concurrency = c
	}
	if o.PeakRSSMB > 0 {
		goal(fmt.Sprintf("peak RSS < 64 MB (%d conns)", cfg.Conns), ptr(o.PeakRSSMB), goalRSSMB, true)
	}
	return o
}

// printReport writes the tables.
func printReport(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "\npromptgate-bench  %s  %s/%s  %d CPUs  rate %d req/s for %s, %d clients for %s, saturation %d conns for %s, repeat %d\n",
		rep.Go, rep.OS, rep.Arch, rep.CPUs, rep.Settings.Rate, rep.Settings.Duration, rep.Settings.Concurrency, rep.Settings.Duration,
		rep.Settings.Conns, rep.Settings.SatDuration, rep.Settings.Repeat)
	if rep.LoadAvgStart != "" {
		fmt.Fprintf(w, "load average at start %s, at end %s (other work on the machine skews every target alike, but adds noise)\n", rep.LoadAvgStart, rep.LoadAvgEnd)
	}
	if len(rep.Settings.PromptgateEnv) > 0 {
		fmt.Fprintf(w, "promptgate runs with %s\n", strings.Join(rep.Settings.PromptgateEnv, " "))
	}
	if !rep.Plugins.Enabled {
		fmt.Fprintf(w, "plugin workloads: off (%s)\n", rep.Plugins.Note)
	}
	if len(rep.Timelines) > 0 {
		printTimelines(w, rep.Timelines)
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tmode\ttarget\tp50 ms\tp99 ms\treq/s\tTTFB p50\tallocs/req\tKB/req\twrites/req\tCPU µs/req\tswitches/req\tRSS MB\terrors\t")
	for _, wr := range rep.Workloads {
		for _, r := range wr.Results {
			ttfb := "-"
			if wr.Stream {
				ttfb = fmt.Sprintf("%.3f", r.TTFBP50Ms)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.3f\t%.3f\t%.0f\t%s\t%.0f\t%.1f\t%.1f\t%.1f\t%.2f\t%.1f\t%d\t\n", wr.Name, r.Mode, r.Target,
				r.P50Ms, r.P99Ms, r.Throughput, ttfb, r.AllocsPerReq, r.BytesPerReq/1024, r.WritesPerReq, r.CPUUsPerReq, r.SwitchesPerReq, r.PeakRSSMB, r.Errors)
		}
	}
	tw.Flush()

	fmt.Fprintf(w, "\noverhead vs the bare reverse proxy (ratio = (promptgate - direct) / (baseline - direct); goal in brackets)\n\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tadded p50 ms\tbase p50 ms\tp50 ratio [<=1.5]\tadded p99 ms\tbase p99 ms\tp99 ratio [<=2]\tTTFB delta ms [<=0.3]\tthroughput ratio [>=0.8]\tCPU/req ratio [<=1.25]\tRSS MB [<64]\tgoals met\t")
	for _, wr := range rep.Workloads {
		o := wr.Overhead
		if o == nil {
			continue
		}
		if _, ok := find(wr.Results, modeRate, targetBaseline); !ok {
			// Only the closed-loop phases ran: no fixed-rate figures to show.
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t%s\t%s\t%.1f\t\t\n", wr.Name, fmtPtr(o.ThroughputRatio, o.Goals, "throughput"),
				fmtPtr(o.CPURatio, o.Goals, "CPU"), o.PeakRSSMB)
			continue
		}
		met := 0
		for _, g := range o.Goals {
			if g.Met {
				met++
			}
		}
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%s\t%.3f\t%.3f\t%s\t%s\t%s\t%s\t%.1f\t%d/%d\t\n", wr.Name,
			o.AddedP50Ms, o.BaselineAddedP50Ms, fmtPtr(o.P50Ratio, o.Goals, "p50"), o.AddedP99Ms, o.BaselineAddedP99Ms,
			fmtPtr(o.P99Ratio, o.Goals, "p99"), fmtPtr(o.TTFBDeltaMs, o.Goals, "stream"), fmtPtr(o.ThroughputRatio, o.Goals, "throughput"),
			fmtPtr(o.CPURatio, o.Goals, "CPU"), o.PeakRSSMB, met, len(o.Goals))
	}
	tw.Flush()
	printConcurrency(w, rep)
	if s := rep.Soak; s != nil && len(s.RSSMB) > 0 {
		fmt.Fprintf(w, "\nsoak: %s of %s at %d conns, %d requests (%d errors): RSS first %.1f MB, last %.1f MB, peak %.1f MB, heap in use %.1f MB\n",
			s.Duration, s.Workload, s.Conns, s.Requests, s.Errors, s.RSSMB[0], s.RSSMB[len(s.RSSMB)-1], s.PeakRSSMB, s.HeapInuseMB)
	}
}

// printConcurrency writes the fixed-concurrency comparison, when that mode ran.
func printConcurrency(w io.Writer, rep *Report) {
	header := false
	var tw *tabwriter.Writer
	for _, wr := range rep.Workloads {
		c := wr.Overhead.concurrency()
		if c == nil {
			continue
		}
		if !header {
			header = true
			fmt.Fprintf(w, "\nat %d concurrent clients (closed loop), the same ratios\n\n", c.Clients)
			tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "workload\tadded p50 ms\tbase p50 ms\tp50 ratio [<=1.5]\tadded p99 ms\tbase p99 ms\tp99 ratio [<=2]\tTTFB delta ms [<=0.3]\tthroughput ratio [>=0.8]\t")
		}
		g := wr.Overhead.Goals
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%s\t%.3f\t%.3f\t%s\t%s\t%s\t\n", wr.Name, c.AddedP50Ms, c.BaselineAddedP50Ms,
			fmtPtr(c.P50Ratio, g, "concurrency p50"), c.AddedP99Ms, c.BaselineAddedP99Ms, fmtPtr(c.P99Ratio, g, "concurrency p99"),
			fmtPtr(c.TTFBDeltaMs, g, "concurrency stream"), fmtPtr(c.ThroughputRatio, g, "concurrency throughput"))
	}
	if tw != nil {
		tw.Flush()
	}
}

// concurrency is o's fixed-concurrency comparison, nil when there is none.
func (o *Overhead) concurrency() *ConcurrencyOverhead {
	if o == nil {
		return nil
	}
	return o.Concurrency
}

// fmtPtr prints a ratio to 3 decimals (so that 0.696 does not read as a met 0.70), with a * when
// its goal (the goal whose name starts with prefix) is missed.
func fmtPtr(v *float64, goals []Goal, prefix string) string {
	if v == nil {
		return "-"
	}
	s := fmt.Sprintf("%.3f", *v)
	for _, g := range goals {
		if strings.HasPrefix(g.Name, prefix) && !g.Met {
			s += " *"
		}
	}
	return s
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
