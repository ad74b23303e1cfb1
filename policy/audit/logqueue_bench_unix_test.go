//go:build unix

package audit

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkLogPaced writes a decision line per benchPace to a file, through Log (on the caller's
// goroutine) and through LogQueue, and reports per line the time the caller spends in Record and
// the process's CPU time.
func BenchmarkLogPaced(b *testing.B) {
	e := Event{RequestID: "0123456789abcdef", Kind: KindToolRemoved, Protocol: "tech", ProtocolVersion: 3,
		Tool: "shell", Verdict: VerdictRemoved, Reason: "not in the protocol's allowlist"}
	for _, c := range []struct {
		name string
		open func(Log) (Recorder, func())
	}{
		{"Log", func(l Log) (Recorder, func()) { return l, func() {} }},
		{"LogQueue", func(l Log) (Recorder, func()) {
			q := NewLogQueue(l, Options{})
			return q, func() { _ = q.Close() }
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "log.jsonl"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			rec, closeRec := c.open(Log{Logger: slog.New(slog.NewJSONHandler(f, nil))})
			ctx := context.Background()
			var inRecord time.Duration
			cpu, _ := usage(b)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				rec.Record(ctx, e)
				inRecord += time.Since(start)
				time.Sleep(benchPace)
			}
			closeRec()
			b.StopTimer()
			cpu2, _ := usage(b)
			n := float64(b.N)
			b.ReportMetric(float64(inRecord.Nanoseconds())/1000/n, "record-µs/event")
			b.ReportMetric(float64((cpu2-cpu).Microseconds())/n, "cpu-µs/event")
		})
	}
}
