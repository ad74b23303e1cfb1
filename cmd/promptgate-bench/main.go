// Command promptgate-bench measures what promptgate adds to a model call, side by side with a bare
// reverse proxy, in one run on one machine.
//
// It starts, each as a child process of its own on 127.0.0.1: a fake upstream (non-stream JSON and
// SSE streams of a configurable size, chunk count and delay), a bare httputil.ReverseProxy that
// reads the whole body first (the baseline), and promptgate built the way `promptgate serve` builds
// it (a real bbolt store, the full pipeline). It then drives the same workloads through the
// upstream directly, the baseline and promptgate in turn, at a fixed rate (open loop: latency is
// measured from the scheduled send time, so back-pressure cannot hide it) and at saturation (closed
// loop, C connections), and reports p50, p99, throughput, time to first byte of streams, the
// server's allocations and bytes per request, peak RSS and the overhead ratios against the
// baseline, as a table and as JSON.
//
// It owns the harness only: the load generator, the fake upstream, the baseline and the report. It
// does not change promptgate: the promptgate under test is wired from the exported packages exactly
// as serve wires it. Every phase is bounded in requests and in time, every child process exits by
// itself when the harness goes away, and the whole run has a deadline.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	// A child process (a server of the run, or a context-source plugin started by promptgate's
	// plugin host) is this same binary; it is told so by its environment, before any flag is read.
	if handled, err := runChildRole(); handled {
		if err != nil {
			fmt.Fprintln(os.Stderr, "promptgate-bench child:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "promptgate-bench:", err)
		os.Exit(1)
	}
}

// run parses the flags, runs the benchmark and prints the table to stdout; progress goes to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	rep, err := bench(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	printReport(stdout, rep)
	if cfg.JSONPath != "" {
		if err := writeJSON(cfg.JSONPath, rep); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", cfg.JSONPath)
	}
	return nil
}
