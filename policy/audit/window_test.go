package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// longWindow is a window no test outlives: whatever is written, was written because something ended
// the window (a flush, the close, a full batch), never because its time was up.
const longWindow = time.Hour

// hangBound tells a call that returns from one that waits for the window; generous for a loaded
// machine.
const hangBound = 30 * time.Second

// batchLog records the size of every write a pipe makes. Set it before the first event: the event's
// send orders the assignment before the writer's first read.
type batchLog struct {
	mu    sync.Mutex
	sizes []int
}

func (l *batchLog) wrap(write func([]Event) error) func([]Event) error {
	return func(b []Event) error {
		l.mu.Lock()
		l.sizes = append(l.sizes, len(b))
		l.mu.Unlock()
		return write(b)
	}
}

func (l *batchLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.sizes)
}

func openWindowRing(t *testing.T, size int, o Options) (*Ring, *batchLog) {
	t.Helper()
	r, err := OpenRingWith(filepath.Join(t.TempDir(), "audit.db"), size, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	var l batchLog
	r.p.write = l.wrap(r.p.write)
	return r, &l
}

// flushSoon is Flush that fails the test instead of waiting for the window.
func flushSoon(t *testing.T, flush func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	if err := flush(ctx); err != nil {
		t.Fatalf("flush: %v (it waited for the window?)", err)
	}
}

// closeSoon is Close that fails the test instead of waiting for the window.
func closeSoon(t *testing.T, close func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(hangBound):
		t.Fatal("Close waited for the window")
	}
}

// allEvents returns every event in the ring, oldest first.
func allEvents(t *testing.T, r *Ring) []Event {
	t.Helper()
	var got []Event
	if _, err := r.Scan(context.Background(), time.Time{}, func(e Event) bool { got = append(got, e); return true }); err != nil {
		t.Fatal(err)
	}
	for i, j := 0, len(got)-1; i < j; i, j = i+1, j-1 {
		got[i], got[j] = got[j], got[i]
	}
	return got
}

// wantSeq checks that es are the events req-1 … req-n, in that order.
func wantSeq(t *testing.T, es []Event, n int) {
	t.Helper()
	if len(es) != n {
		t.Fatalf("%d events, want %d", len(es), n)
	}
	for i, e := range es {
		if want := fmt.Sprintf("req-%d", i+1); e.RequestID != want {
			t.Fatalf("event %d is %s, want %s", i, e.RequestID, want)
		}
	}
}

func TestRingWindowIsOneTransaction(t *testing.T) {
	t.Parallel()
	r, writes := openWindowRing(t, 100, Options{Window: longWindow})
	ctx := context.Background()
	for i := 1; i <= 10; i++ {
		r.Record(ctx, ev(i))
	}
	// The window is open: nothing is in the file yet.
	if got, err := r.Query(ctx, Filter{}); err != nil || len(got) != 0 || r.Stats().Written != 0 {
		t.Fatalf("before the window ended: %d events, %+v, err %v", len(got), r.Stats(), err)
	}
	flushSoon(t, r.FlushContext)
	for i := 11; i <= 13; i++ {
		r.Record(ctx, ev(i))
	}
	flushSoon(t, r.FlushContext)
	if got := writes.String(); got != "[10 3]" {
		t.Fatalf("transactions of %s events, want [10 3]", got)
	}
	wantSeq(t, allEvents(t, r), 13)
}

func TestRingFullBatchEndsWindow(t *testing.T) {
	t.Parallel()
	r, writes := openWindowRing(t, 10000, Options{Window: longWindow})
	for i := 1; i <= maxBatch; i++ {
		r.Record(context.Background(), ev(i))
	}
	// No flush: maxBatch events waiting end the window by themselves.
	deadline := time.Now().Add(hangBound)
	for r.Stats().Written < maxBatch {
		if time.Now().After(deadline) {
			t.Fatalf("a full batch did not end the window: %+v", r.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	r.Record(context.Background(), ev(maxBatch+1))
	flushSoon(t, r.FlushContext)
	wantSeq(t, allEvents(t, r), maxBatch+1)
	if s := r.Stats(); s.Written != maxBatch+1 || s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
	var sizes []int
	writes.mu.Lock()
	sizes = append(sizes, writes.sizes...)
	writes.mu.Unlock()
	if sizes[0] != maxBatch {
		t.Fatalf("transactions of %v events, want the first of %d", sizes, maxBatch)
	}
}

// Events are written in the order they were recorded, across windows, flushes and transactions cut
// at maxBatch.
func TestRingOrderAcrossWindows(t *testing.T) {
	t.Parallel()
	for _, window := range []time.Duration{longWindow, -1} {
		t.Run(fmt.Sprint(window), func(t *testing.T) {
			t.Parallel()
			const n = 3000 // below DefaultBuffer: nothing can be dropped, however slow the writer
			r, writes := openWindowRing(t, n, Options{Window: window})
			for i := 1; i <= n; i++ {
				r.Record(context.Background(), ev(i))
				if i%700 == 0 {
					flushSoon(t, r.FlushContext)
				}
			}
			flushSoon(t, r.FlushContext)
			wantSeq(t, allEvents(t, r), n)
			writes.mu.Lock()
			defer writes.mu.Unlock()
			for _, s := range writes.sizes {
				if s > maxBatch {
					t.Fatalf("a transaction of %d events (most: %d)", s, maxBatch)
				}
			}
		})
	}
}

// Close writes what waits in the open window, without waiting for it to end.
func TestRingCloseDrainsTheWindow(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10, 1500} { // one transaction; three
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "audit.db")
			r, err := OpenRingWith(path, 5000, nil, Options{Window: longWindow})
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= n; i++ {
				r.Record(context.Background(), ev(i))
			}
			closeSoon(t, r.Close)
			if s := r.Stats(); s.Written != uint64(n) {
				t.Fatalf("stats after close %+v", s)
			}
			r, err = OpenRing(path, 5000, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			wantSeq(t, allEvents(t, r), n)
		})
	}
}

// What GET /admin/audit relies on: an event recorded before a Flush is in the file when Flush
// returns, while other goroutines keep recording and the window is open.
func TestRingFlushSeesEarlierEvents(t *testing.T) {
	t.Parallel()
	r, _ := openWindowRing(t, 100000, Options{Window: longWindow})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				id := fmt.Sprintf("w%d-%d", w, i)
				r.Record(ctx, Event{RequestID: id, Kind: KindToolCall, Verdict: VerdictBlocked})
				fctx, cancel := context.WithTimeout(ctx, hangBound)
				err := r.FlushContext(fctx)
				cancel()
				if err != nil {
					errs <- fmt.Sprintf("flush after %s: %v", id, err)
					return
				}
				got, err := r.Query(ctx, Filter{RequestID: id})
				if err != nil || len(got) != 1 {
					errs <- fmt.Sprintf("%s after its flush: %d events, err %v", id, len(got), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// A flood (the writer held up, more events than the buffer) is bounded and counted; what is kept is
// written in order, and Record never waits.
func TestRingFloodKeepsOrderOfWhatItKeeps(t *testing.T) {
	t.Parallel()
	r, _ := openWindowRing(t, 1000, Options{Window: longWindow, Buffer: 16})
	hold, held := make(chan struct{}), make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(hold) }) }) // before the ring's Close
	write := r.p.write
	var once sync.Once
	r.p.write = func(b []Event) error {
		once.Do(func() { close(held); <-hold })
		return write(b)
	}
	const n = 500
	r.Record(context.Background(), ev(1))
	go func() { _ = r.Flush() }() // the writer takes event 1 and stops in its first write
	select {
	case <-held:
	case <-time.After(hangBound):
		t.Fatal("Flush did not end the window")
	}
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for i := 2; i <= n; i++ {
			r.Record(context.Background(), ev(i))
		}
	}()
	select {
	case <-recorded:
	case <-time.After(hangBound):
		t.Fatal("Record waited for the writer")
	}
	// The writer holds event 1; the buffer holds 16 more; the rest is dropped.
	if d := r.Dropped(); d != n-1-16 {
		t.Fatalf("dropped %d, want %d", d, n-1-16)
	}
	release.Do(func() { close(hold) })
	flushSoon(t, r.FlushContext)
	wantSeq(t, allEvents(t, r), 17)
	if s := r.Stats(); s.Written != 17 || s.Dropped != n-17 {
		t.Fatalf("stats %+v", s)
	}
}

func TestJSONLWindowOneWrite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	j, err := OpenJSONLWith(path, nil, Options{Window: longWindow})
	if err != nil {
		t.Fatal(err)
	}
	var writes batchLog
	j.p.write = writes.wrap(j.p.write)
	for i := 1; i <= 5; i++ {
		j.Record(context.Background(), ev(i))
	}
	if b, err := os.ReadFile(path); err != nil || len(b) != 0 {
		t.Fatalf("before the window ended: %q, err %v", b, err)
	}
	flushSoon(t, j.p.flush)
	for i := 6; i <= 8; i++ {
		j.Record(context.Background(), ev(i))
	}
	closeSoon(t, j.Close)
	if got := writes.String(); got != "[5 3]" {
		t.Fatalf("writes of %s events, want [5 3]", got)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		got = append(got, e)
	}
	wantSeq(t, got, 8)
}

// Options' zero values are the defaults; a negative buffer is the default too.
func TestOptionsDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o      Options
		window time.Duration
		buffer int
	}{
		{Options{}, DefaultWindow, DefaultBuffer},
		{Options{Window: -1, Buffer: -5}, -1, DefaultBuffer},
		{Options{Window: time.Second, Buffer: 3}, time.Second, 3},
	} {
		if w, b := c.o.window(), c.o.buffer(); w != c.window || b != c.buffer {
			t.Errorf("%+v: window %v buffer %d, want %v %d", c.o, w, b, c.window, c.buffer)
		}
	}
}
