package plugins_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/config"
)

// slowHost runs three sources that each take 100ms, uncached, each in its own module.
func slowHost(b *testing.B) *plugins.Host {
	var entries []config.Plugin
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
		r, err := h.Gather(ctx, plugins.Query{Mode: policy.ModeFull})
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
			r, err := h.Gather(ctx, plugins.Query{Mode: policy.ModeFull, ModulesOff: off})
			if err != nil || len(r.Sources) != 1 {
				b.Fatalf("sources %d, skipped %v, err %v", len(r.Sources), r.Skipped, err)
			}
		}
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/op")
}
