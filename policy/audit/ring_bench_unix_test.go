//go:build unix

package audit

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// benchPace is the time between two events of a paced benchmark: a proxy recording a thousand decisions a
// second, a low load for the ring.
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

// BenchmarkRingPaced records one event per benchPace and reports, per event, the process's CPU time, its
// voluntary context switches and bbolt's page writes, the writer's work included (the last window is
// flushed before the figures are read).
func BenchmarkRingPaced(b *testing.B) {
	r, err := OpenRing(filepath.Join(b.TempDir(), "audit.db"), 10000, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	writes := pageWrites(r)
	cpu, switches := usage(b)
	b.ResetTimer()
	for i := range b.N {
		r.Record(ctx, ev(i))
		time.Sleep(benchPace)
	}
	if err := r.Flush(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	cpu2, switches2 := usage(b)
	n := float64(b.N)
	b.ReportMetric(float64((cpu2-cpu).Microseconds())/n, "cpu-µs/event")
	b.ReportMetric(float64(switches2-switches)/n, "switches/event")
	b.ReportMetric(float64(pageWrites(r)-writes)/n, "pwrite/event")
}

// pageWrites is how many writes bbolt has made to the ring's file.
func pageWrites(r *Ring) int64 {
	s := r.db.Stats()
	return s.TxStats.GetWrite()
}
