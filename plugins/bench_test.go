package plugins_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/policy/modules"
)

// slowHost runs three sources that each take 100ms, uncached, each in its own module.
func slowHost(b *testing.B) *plugins.Host {
	var entries []plugins.Spec
	for _, name := range []string{"one", "two", "three"} {
		e := entry(name, "testsource", map[string]any{"behavior": "slow", "delay": "100ms"})
		e.Timeout = 2 * time.Second
		entries = append(entries, e)
	}
	return startHost(b, plugins.HostOptions{Logger: slog.New(slog.DiscardHandler)}, entries...)
}

// BenchmarkGatherParallel: one request to three 100ms sources. The host calls them at once, so
// an op takes about 100ms (not 300ms); compare BenchmarkGatherSequential.
func BenchmarkGatherParallel(b *testing.B) {
	h := slowHost(b)
	ctx := context.Background()
	start := time.Now()
	for b.Loop() {
		r, err := h.Gather(ctx, gather.Query{Mode: modules.Full})
		if err != nil || len(r.Sources) != 3 {
			b.Fatalf("sources %d, skipped %v, err %v", len(r.Sources), r.Skipped, err)
		}
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/op")
}

// BenchmarkGatherSequential is the baseline: the same three sources asked one after another
// (three requests, each with the two other modules switched off).
func BenchmarkGatherSequential(b *testing.B) {
	h := slowHost(b)
	ctx := context.Background()
	start := time.Now()
	for b.Loop() {
		for _, only := range []string{"one", "two", "three"} {
			var off []string
			for _, m := range []string{"one", "two", "three"} {
				if m != only {
					off = append(off, m)
				}
			}
			r, err := h.Gather(ctx, gather.Query{Mode: modules.Full, ModulesOff: off})
			if err != nil || len(r.Sources) != 1 {
				b.Fatalf("sources %d, skipped %v, err %v", len(r.Sources), r.Skipped, err)
			}
		}
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/op")
}

// BenchmarkGatherCached: one request to one source whose answer is in the cache, the case of a
// cached plugin in the hot path. A hit should cost about what finding the answer in a map costs;
// compare BenchmarkGatherNone (no source reaches the request: the fixed cost of Gather).
func BenchmarkGatherCached(b *testing.B) {
	e := entry("memory", "testsource", nil)
	e.CacheTTL = time.Hour
	h := startHost(b, plugins.HostOptions{Logger: slog.New(slog.DiscardHandler)}, e)
	ctx := context.Background()
	q := gather.Query{Protocol: "bench", Mode: modules.Full, User: "u-1", Conversation: "c-1", LatestUser: "hello"}
	if _, err := h.Gather(ctx, q); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r, err := h.Gather(ctx, q)
		if err != nil || len(r.Sources) != 1 {
			b.Fatalf("sources %d, skipped %v, err %v", len(r.Sources), r.Skipped, err)
		}
	}
}

// BenchmarkGatherNone is the baseline of BenchmarkGatherCached: the same host, its one source below
// the request's mode.
func BenchmarkGatherNone(b *testing.B) {
	e := entry("memory", "testsource", nil)
	e.CacheTTL = time.Hour
	e.MinMode = "full"
	h := startHost(b, plugins.HostOptions{Logger: slog.New(slog.DiscardHandler)}, e)
	ctx := context.Background()
	q := gather.Query{Protocol: "bench", Mode: modules.Minimal, User: "u-1", Conversation: "c-1", LatestUser: "hello"}
	b.ReportAllocs()
	for b.Loop() {
		r, err := h.Gather(ctx, q)
		if err != nil || len(r.Sources) != 0 {
			b.Fatalf("sources %d, skipped %v, err %v", len(r.Sources), r.Skipped, err)
		}
	}
}
