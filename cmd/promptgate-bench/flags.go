package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Defaults of the flags.
const (
	DefaultRate        = 200
	DefaultDuration    = 5 * time.Second
	DefaultSatDuration = 3 * time.Second
	DefaultWarmup      = 500 * time.Millisecond
	DefaultConns       = 16
	DefaultConcurrency = 8
	DefaultOpenWorkers = 128
	DefaultRespBytes   = 1024
	DefaultChunks      = 200
	DefaultRepeat      = 1
	// maxPhaseRequests caps the requests of one closed-loop phase, whatever its duration.
	maxPhaseRequests = 2_000_000
)

// Config is one run of the harness.
type Config struct {
	// Rate is the open-loop send rate, requests per second.
	Rate int
	// Duration is the measured part of a fixed-rate or fixed-concurrency phase; SatDuration that of
	// a saturation phase.
	Duration, SatDuration time.Duration
	// Warmup runs before each phase, unmeasured (connections, caches).
	Warmup time.Duration
	// Conns is the number of connections (and workers) of a saturation phase.
	Conns int
	// Concurrency is the number of clients of a fixed-concurrency phase: each sends its next
	// request once the answer to its last one is complete.
	Concurrency int
	// OpenWorkers caps the requests in flight of an open-loop phase; sends that find every worker
	// busy wait, and their latency still counts from their scheduled time.
	OpenWorkers int
	// Repeat runs every phase this many times, interleaved; the report gives the median of each
	// figure.
	Repeat int
	// Workloads to run, by name; all when empty.
	Workloads []string
	// Modes to run: "rate", "saturation", "concurrency"; all three when empty.
	Modes []string
	// Plugins runs the workloads with 1 and 3 context-source plugins, when the plugin host is
	// available.
	Plugins bool
	// RespBytes is the size of a non-stream upstream answer; Chunks the number of chunks of a
	// stream and ChunkDelay the pause between two of them.
	RespBytes, Chunks int
	ChunkDelay        time.Duration
	// JSONPath, when set, receives the report as JSON.
	JSONPath string
	// PprofDir, when set, receives a CPU profile of promptgate for each workload's saturation phase
	// and its allocation profile at the end.
	PprofDir string
	// Soak, when positive, runs the 8 KB workload at saturation against promptgate for this long
	// after everything else and samples its RSS.
	Soak time.Duration
	// PromptgateEnv are extra KEY=VALUE environment variables of the promptgate processes only
	// (GOGC, GOMEMLIMIT, GODEBUG...), to measure a runtime setting against the same baseline.
	PromptgateEnv []string
	// Timeline, when positive, replaces the load phases by the timeline pass: this many requests of
	// each workload sent one at a time to each target, every step of each timed (see timeline.go).
	Timeline int
	// TraceDir, with Timeline, receives an execution trace and the block and mutex profiles of both
	// proxies taken during the timeline pass.
	TraceDir string
	// Quick is the short pass used by the test: tiny phases, no repeat.
	Quick bool
}

var allModes = []string{modeRate, modeSaturation, modeConcurrency}

// parseFlags reads the command line.
func parseFlags(args []string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("promptgate-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := Config{}
	var workloads, modes string
	fs.IntVar(&c.Rate, "rate", DefaultRate, "open-loop send rate, requests per second")
	fs.DurationVar(&c.Duration, "duration", DefaultDuration, "measured length of a fixed-rate (open-loop) or fixed-concurrency phase")
	fs.DurationVar(&c.SatDuration, "sat-duration", DefaultSatDuration, "measured length of a closed-loop (saturation) phase")
	fs.DurationVar(&c.Warmup, "warmup", DefaultWarmup, "unmeasured warm-up before each phase")
	fs.IntVar(&c.Conns, "conns", DefaultConns, "connections of a saturation phase")
	fs.IntVar(&c.Concurrency, "concurrency", DefaultConcurrency, "clients of a fixed-concurrency phase, each sending its next request once its last answer is complete")
	fs.IntVar(&c.OpenWorkers, "open-workers", DefaultOpenWorkers, "most requests in flight in an open-loop phase")
	fs.IntVar(&c.Repeat, "repeat", DefaultRepeat, "run every phase this many times (interleaved) and report medians")
	fs.StringVar(&workloads, "workloads", "", "comma-separated workloads to run (default all): "+strings.Join(workloadNames(), ","))
	fs.StringVar(&modes, "modes", "", "comma-separated modes: rate,saturation,concurrency (default all three)")
	fs.BoolVar(&c.Plugins, "plugins", true, "also run the workloads with 1 and 3 context-source plugins (when the plugin host is available)")
	fs.IntVar(&c.RespBytes, "resp-bytes", DefaultRespBytes, "size of a non-stream upstream answer, bytes")
	fs.IntVar(&c.Chunks, "chunks", DefaultChunks, "chunks of an upstream stream")
	fs.DurationVar(&c.ChunkDelay, "chunk-delay", 0, "pause of the upstream between two stream chunks")
	fs.StringVar(&c.JSONPath, "json", "", "write the report as JSON to this file")
	fs.StringVar(&c.PprofDir, "pprof", "", "write CPU profiles of promptgate (one per workload, saturation phase) and its allocation profile to this folder")
	fs.DurationVar(&c.Soak, "soak", 0, "after the workloads, run the 8 KB workload at saturation against promptgate this long and sample its RSS")
	fs.Func("promptgate-env", "KEY=VALUE added to the environment of the promptgate processes only, e.g. GOGC=400 (repeatable)", func(v string) error {
		k, _, ok := strings.Cut(v, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return fmt.Errorf("%q: use KEY=VALUE", v)
		}
		c.PromptgateEnv = append(c.PromptgateEnv, v)
		return nil
	})
	fs.IntVar(&c.Timeline, "timeline", 0, "instead of the load phases, send this many requests of each workload one at a time to each target and time every step of each")
	fs.StringVar(&c.TraceDir, "trace", "", "with --timeline: write an execution trace and the block and mutex profiles of both proxies to this folder")
	fs.BoolVar(&c.Quick, "quick", false, "a short pass of a few seconds (figures are not meaningful; used by the test)")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q: every setting is a flag (-h lists them)", fs.Args())
	}
	c.Workloads = splitList(workloads)
	c.Modes = splitList(modes)
	if c.Quick {
		c.Duration, c.SatDuration, c.Warmup, c.Repeat = 100*time.Millisecond, 100*time.Millisecond, 20*time.Millisecond, 1
		c.Conns = min(c.Conns, 4)
		c.Concurrency = min(c.Concurrency, 2)
		c.Timeline = min(c.Timeline, 20)
	}
	return c, c.validate()
}

// validate reports every bad setting, each naming the flag.
func (c Config) validate() error {
	var errs []error
	bad := func(flagName, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flagName, fmt.Sprintf(format, args...)))
	}
	if c.Rate < 1 || c.Rate > 100_000 {
		bad("rate", "%d: use 1 to 100000 requests per second", c.Rate)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"duration", c.Duration}, {"sat-duration", c.SatDuration}} {
		if d.v < 10*time.Millisecond || d.v > time.Hour {
			bad(d.name, "%s: use 10ms to 1h", d.v)
		}
	}
	if c.Warmup < 0 || c.Warmup > time.Minute {
		bad("warmup", "%s: use 0 to 1m", c.Warmup)
	}
	if c.Conns < 1 || c.Conns > 1024 {
		bad("conns", "%d: use 1 to 1024", c.Conns)
	}
	if c.Concurrency < 1 || c.Concurrency > 1024 {
		bad("concurrency", "%d: use 1 to 1024", c.Concurrency)
	}
	if c.Timeline < 0 || c.Timeline > 100_000 {
		bad("timeline", "%d: use 0 (off) to 100000 requests", c.Timeline)
	}
	if c.TraceDir != "" && c.Timeline == 0 {
		bad("trace", "%q: traces are taken during the timeline pass; add --timeline N", c.TraceDir)
	}
	if c.OpenWorkers < 1 || c.OpenWorkers > 4096 {
		bad("open-workers", "%d: use 1 to 4096", c.OpenWorkers)
	}
	if c.Repeat < 1 || c.Repeat > 100 {
		bad("repeat", "%d: use 1 to 100", c.Repeat)
	}
	if c.Rate > 0 && c.Duration > 0 && float64(c.Rate)*c.Duration.Seconds() > maxPhaseRequests {
		bad("rate", "%d req/s for %s is over %d requests in one phase; shorten --duration", c.Rate, c.Duration, maxPhaseRequests)
	}
	for _, w := range c.Workloads {
		if !slices.Contains(workloadNames(), w) {
			bad("workloads", "unknown workload %q; choose from %s", w, strings.Join(workloadNames(), ","))
		}
	}
	for _, m := range c.Modes {
		if !slices.Contains(allModes, m) {
			bad("modes", "unknown mode %q; use rate, saturation or concurrency", m)
		}
	}
	if c.RespBytes < 64 || c.RespBytes > 16<<20 {
		bad("resp-bytes", "%d: use 64 to 16777216", c.RespBytes)
	}
	if c.Chunks < 10 || c.Chunks > 100_000 {
		bad("chunks", "%d: use 10 to 100000", c.Chunks)
	}
	if c.ChunkDelay < 0 || c.ChunkDelay > time.Second {
		bad("chunk-delay", "%s: use 0 to 1s", c.ChunkDelay)
	}
	if c.Soak < 0 || c.Soak > 24*time.Hour {
		bad("soak", "%s: use 0 to 24h", c.Soak)
	}
	return errors.Join(errs...)
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
