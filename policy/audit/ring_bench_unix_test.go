//go:build unix

package audit

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// benchPace is the time between two events of a paced benchmark: a proxy recording a thousand
// decisions a second, a low load for the ring.
const benchPace = time.Millisecond

// usage is the process's CPU time and voluntary context switches so far.
func usage(b *testing.B) (cpu time.Duration, switches int64) {
	b.Helper()
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano()), int64(u.Nvcsw)
}

// BenchmarkRingPaced records one event per benchPace and reports, per event, the process's CPU
// time, its voluntary context switches and bbolt's page writes, the writer's work included (the
// last window is flushed before the figures are read). "pace" is the baseline: the same loop
// without the ring; "ring" starts empty, "ring-full" holds its size in events already, so that
// every window also deletes as many as it adds (a proxy's ring after its first ten thousand
// decisions).
func BenchmarkRingPaced(b *testing.B) {
	b.Run("pace", func(b *testing.B) { pacedRun(b, nil) })
	b.Run("ring", func(b *testing.B) { pacedRun(b, openBenchRing(b, 0)) })
	b.Run("ring-full", func(b *testing.B) { pacedRun(b, openBenchRing(b, benchRingSize)) })
}

// benchRingSize is the paced benchmark's ring size: the default.
const benchRingSize = DefaultRingSize

// openBenchRing opens a ring of benchRingSize holding prefill events, written before it returns.
func openBenchRing(b *testing.B, prefill int) *Ring {
	b.Helper()
	r, err := OpenRing(filepath.Join(b.TempDir(), "audit.db"), benchRingSize, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	batch := make([]Event, 0, 1000)
	for i := range prefill {
		batch = append(batch, ev(i))
		if len(batch) == cap(batch) || i == prefill-1 {
			if err := r.write(batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	return r
}

// pacedRun records one event per benchPace into r (nil: only the pacing) and reports the figures
// per event.
func pacedRun(b *testing.B, r *Ring) {
	ctx := context.Background()
	var writes int64
	if r != nil {
		writes = pageWrites(r)
	}
	cpu, switches := usage(b)
	b.ResetTimer()
	for i := range b.N {
		if r != nil {
			r.Record(ctx, ev(i))
		}
		time.Sleep(benchPace)
	}
	if r != nil {
		if err := r.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu2, switches2 := usage(b)
	n := float64(b.N)
	b.ReportMetric(float64((cpu2-cpu).Microseconds())/n, "cpu-µs/event")
	b.ReportMetric(float64(switches2-switches)/n, "switches/event")
	if r != nil {
		b.ReportMetric(float64(pageWrites(r)-writes)/n, "pwrite/event")
	}
}

// pageWrites is how many writes bbolt has made to the ring's file.
func pageWrites(r *Ring) int64 {
	s := r.db.Stats()
	return s.TxStats.GetWrite()
}
