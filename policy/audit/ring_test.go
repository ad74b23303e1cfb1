package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openTestRing(t *testing.T, size int) *Ring {
	t.Helper()
	r, err := OpenRing(filepath.Join(t.TempDir(), "audit.db"), size, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

func ev(i int) Event {
	return Event{
		Time: time.Date(2026, 2, 24, 10, 0, i, 0, time.UTC), RequestID: fmt.Sprintf("req-%d", i),
		Kind: KindToolCall, Protocol: "tech", ProtocolVersion: 1, Tool: "web_fetch", Verdict: VerdictAllowed,
	}
}

func query(t *testing.T, r *Ring, f Filter) []Event {
	t.Helper()
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := r.Query(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func ids(es []Event) string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.RequestID
	}
	return strings.Join(s, ",")
}

func TestRingBoundsKeepsNewest(t *testing.T) {
	r := openTestRing(t, 5)
	for i := 1; i <= 12; i++ {
		r.Record(context.Background(), ev(i))
		if i%4 == 0 {
			_ = r.Flush() // several batches, so trimming runs more than once
		}
	}
	got := query(t, r, Filter{})
	if want := "req-12,req-11,req-10,req-9,req-8"; ids(got) != want {
		t.Fatalf("kept %s, want %s", ids(got), want)
	}
	var n int
	if err := r.db.View(func(tx *bolt.Tx) error { n = tx.Bucket(bucketEvents).Stats().KeyN; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Fatalf("file holds %d events, want 5", n)
	}
	if s := r.Stats(); s.Written != 12 || s.Dropped != 0 || s.Failed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRingOrderingAndLimit(t *testing.T) {
	r := openTestRing(t, 100)
	for i := 1; i <= 30; i++ {
		r.Record(context.Background(), ev(i))
	}
	got := query(t, r, Filter{Limit: 3})
	if want := "req-30,req-29,req-28"; ids(got) != want {
		t.Fatalf("got %s, want %s", ids(got), want)
	}
	if got := query(t, r, Filter{}); len(got) != 30 || got[0].RequestID != "req-30" || got[29].RequestID != "req-1" {
		t.Fatalf("default query: %s", ids(got))
	}
	// An event keeps every field through the file.
	want := Event{Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), RequestID: "r", Kind: KindActivated, Protocol: "tech",
		ProtocolVersion: 4, Tool: "t", Verdict: VerdictChanged, Reason: "why", Rule: "rules[0]", Actor: "alice",
		Target: "protocols/tech", Version: 4, ArgsSHA256: "ab", Args: `{"a":1}`}
	r.Record(context.Background(), want)
	got = query(t, r, Filter{Limit: 1})
	if len(got) != 1 || got[0] != want {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

func TestRingQueryLimitClamped(t *testing.T) {
	r := openTestRing(t, 2000)
	for i := 0; i < 1500; i++ {
		r.Record(context.Background(), ev(i%60))
	}
	if got := query(t, r, Filter{Limit: 5000}); len(got) != MaxQueryLimit {
		t.Fatalf("limit 5000 returned %d, want %d", len(got), MaxQueryLimit)
	}
	if got := query(t, r, Filter{Limit: -1}); len(got) != DefaultQueryLimit {
		t.Fatalf("limit -1 returned %d, want %d", len(got), DefaultQueryLimit)
	}
}

func TestRingFilters(t *testing.T) {
	r := openTestRing(t, 100)
	ctx := context.Background()
	base := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	r.Record(ctx, Event{Time: base, RequestID: "a", Kind: KindToolRemoved, Protocol: "tech", Tool: "shell", Verdict: VerdictRemoved})
	r.Record(ctx, Event{Time: base.Add(time.Second), RequestID: "a", Kind: KindToolCall, Protocol: "tech", Tool: "web_fetch", Verdict: VerdictBlocked})
	r.Record(ctx, Event{Time: base.Add(2 * time.Second), RequestID: "b", Kind: KindToolCall, Protocol: "public", Tool: "web_fetch", Verdict: VerdictAllowed})
	r.Record(ctx, Event{Time: base.Add(3 * time.Second), Kind: KindActivated, Target: "protocols/tech", Protocol: "tech", Version: 2, Verdict: VerdictChanged, Actor: "ops"})
	for _, c := range []struct {
		name string
		f    Filter
		want string // kinds, newest first
	}{
		{"requestId", Filter{RequestID: "a"}, "tool_call,tool_removed"},
		{"verdict", Filter{Verdict: VerdictBlocked}, "tool_call"},
		{"protocol", Filter{Protocol: "tech"}, "activated,tool_call,tool_removed"},
		{"kind", Filter{Kind: KindToolCall}, "tool_call,tool_call"},
		{"tool", Filter{Tool: "web_fetch"}, "tool_call,tool_call"},
		{"combined", Filter{Protocol: "tech", Tool: "web_fetch"}, "tool_call"},
		{"none", Filter{RequestID: "zzz"}, ""},
		{"since", Filter{Since: base.Add(2 * time.Second)}, "activated,tool_call"},
		{"since exact match is kept", Filter{Since: base.Add(3 * time.Second)}, "activated"},
		{"since and protocol", Filter{Since: base.Add(time.Second), Protocol: "tech"}, "activated,tool_call"},
		{"since in the future", Filter{Since: base.Add(time.Hour)}, ""},
		{"until is exclusive", Filter{Until: base.Add(2 * time.Second)}, "tool_call,tool_removed"},
		{"since and until", Filter{Since: base.Add(time.Second), Until: base.Add(3 * time.Second)}, "tool_call,tool_call"},
		{"until before everything", Filter{Until: base}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := query(t, r, c.f)
			kinds := make([]string, len(got))
			for i, e := range got {
				kinds[i] = e.Kind
			}
			if s := strings.Join(kinds, ","); s != c.want {
				t.Fatalf("got %q, want %q", s, c.want)
			}
		})
	}
}

func TestRingSinceStopsEarlyButToleratesDisorder(t *testing.T) {
	r := openTestRing(t, 100)
	ctx := context.Background()
	base := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	// Recorded in this order; times are a little out of order, as with concurrent requests.
	r.Record(ctx, Event{Time: base.Add(-time.Hour), RequestID: "old"})
	r.Record(ctx, Event{Time: base.Add(2 * time.Second), RequestID: "new1"})
	r.Record(ctx, Event{Time: base.Add(-time.Second), RequestID: "slightly-before"})
	r.Record(ctx, Event{Time: base.Add(time.Second), RequestID: "new2"})
	if got := ids(query(t, r, Filter{Since: base})); got != "new2,new1" {
		t.Fatalf("got %s", got)
	}
}

func TestRingScan(t *testing.T) {
	ctx := context.Background()
	base := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	t.Run("every event since, newest first, and covered when an older one is held", func(t *testing.T) {
		r := openTestRing(t, 5000)
		r.Record(ctx, Event{Time: base.Add(-2 * time.Hour), RequestID: "old"})
		for i := range 1500 { // more than MaxQueryLimit: Scan has no limit
			r.Record(ctx, Event{Time: base.Add(time.Duration(i) * time.Millisecond), RequestID: fmt.Sprint(i)})
		}
		_ = r.Flush()
		var got []string
		covered, err := r.Scan(ctx, base, func(e Event) bool { got = append(got, e.RequestID); return true })
		if err != nil || !covered || len(got) != 1500 || got[0] != "1499" || got[1499] != "0" {
			t.Fatalf("covered %v err %v, %d events, first %v", covered, err, len(got), got[:1])
		}
	})
	t.Run("a ring that dropped events and holds none older is not covered", func(t *testing.T) {
		r := openTestRing(t, 3)
		for i := range 6 {
			r.Record(ctx, Event{Time: base.Add(time.Duration(i) * time.Second), RequestID: fmt.Sprint(i)})
		}
		_ = r.Flush()
		n := 0
		covered, err := r.Scan(ctx, base, func(Event) bool { n++; return true })
		if err != nil || covered || n != 3 {
			t.Fatalf("covered %v err %v n %d", covered, err, n)
		}
		// From a time the ring still holds, it is covered.
		covered, _ = r.Scan(ctx, base.Add(4*time.Second), func(Event) bool { return true })
		if !covered {
			t.Fatal("scan from the held range is not covered")
		}
	})
	t.Run("a ring that never dropped is covered; fn can stop the scan", func(t *testing.T) {
		r := openTestRing(t, 10)
		for i := range 4 {
			r.Record(ctx, Event{Time: base.Add(time.Duration(i) * time.Second), RequestID: fmt.Sprint(i)})
		}
		_ = r.Flush()
		n := 0
		covered, _ := r.Scan(ctx, base.Add(-time.Hour), func(Event) bool { n++; return true })
		if !covered || n != 4 {
			t.Fatalf("covered %v n %d", covered, n)
		}
		n = 0
		_, _ = r.Scan(ctx, base.Add(-time.Hour), func(Event) bool { n++; return n < 2 })
		if n != 2 {
			t.Fatalf("fn returned false after 2, called %d times", n)
		}
	})
}

func TestRingReopenKeepsEvents(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	r, err := OpenRing(path, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		r.Record(context.Background(), ev(i))
	}
	if err := r.Close(); err != nil { // Close drains the buffer: no Flush here on purpose
		t.Fatal(err)
	}
	r, err = OpenRing(path, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Record(context.Background(), ev(5))
	if got := ids(query(t, r, Filter{})); got != "req-5,req-4,req-3,req-2,req-1" {
		t.Fatalf("after reopen: %s", got)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopened smaller: the oldest beyond the new size go at once.
	r, err = OpenRing(path, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := ids(query(t, r, Filter{})); got != "req-5,req-4" {
		t.Fatalf("after reopen with size 2: %s", got)
	}
}

func TestRingLockedFileNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.db")
	r, err := OpenRing(path, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// bbolt's flock is per open file description, so a second open in the same process waits like
	// another process would.
	_, err = OpenRing(path, 10, nil)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second open: %v", err)
	}
}

func TestRingBadSize(t *testing.T) {
	if _, err := OpenRing(filepath.Join(t.TempDir(), "a.db"), 0, nil); err == nil {
		t.Fatal("size 0 accepted")
	}
}

func TestRingConcurrentRecord(t *testing.T) {
	r := openTestRing(t, 100000)
	const writers, each = 16, 500
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				r.Record(context.Background(), Event{RequestID: fmt.Sprintf("w%d-%d", w, i), Kind: KindToolCall, Verdict: VerdictAllowed})
			}
		}()
	}
	// Queries and flushes run alongside.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20; i++ {
			_, _ = r.Query(context.Background(), Filter{Limit: 10})
			_ = r.Flush()
		}
	}()
	wg.Wait()
	<-done
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	s := r.Stats()
	if s.Written+s.Dropped != writers*each || s.Failed != 0 {
		t.Fatalf("stats %+v, want written+dropped = %d", s, writers*each)
	}
	got, err := r.Query(context.Background(), Filter{Limit: MaxQueryLimit})
	if err != nil {
		t.Fatal(err)
	}
	if want := min(int(s.Written), MaxQueryLimit); len(got) != want {
		t.Fatalf("query returned %d, want %d", len(got), want)
	}
	for _, e := range got {
		if e.Time.IsZero() {
			t.Fatal("Record did not set the time")
		}
	}
}

// A writer that cannot write (another transaction holds the file's write lock) must not slow
// Record: the buffer fills, further events are dropped and counted, and nothing blocks.
func TestRingFullBufferDropsInsteadOfBlocking(t *testing.T) {
	r, err := OpenRingWith(filepath.Join(t.TempDir(), "audit.db"), 1000, nil, Options{Buffer: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	hold, held := make(chan struct{}), make(chan struct{})
	go func() {
		_ = r.db.Update(func(*bolt.Tx) error { close(held); <-hold; return nil })
	}()
	<-held
	// A Record that blocked would block until hold is closed: the bound only tells the two apart,
	// generous for a loaded machine.
	const n = 200
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for i := 0; i < n; i++ {
			r.Record(context.Background(), ev(i))
		}
	}()
	select {
	case <-recorded:
	case <-time.After(30 * time.Second):
		close(hold)
		t.Fatalf("Record blocked: %d events not recorded after 30 s", n)
	}
	dropped := r.Dropped()
	if dropped == 0 || dropped >= n {
		t.Fatalf("dropped %d of %d, want some but not all", dropped, n)
	}
	close(hold)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	s := r.Stats()
	if s.Written+s.Dropped != n || s.Dropped != dropped {
		t.Fatalf("stats %+v after release (dropped before: %d)", s, dropped)
	}
	got, err := r.Query(context.Background(), Filter{Limit: MaxQueryLimit})
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(got)) != s.Written {
		t.Fatalf("ring holds %d events, %d written", len(got), s.Written)
	}
}

// A write that fails is counted and logged; the ring keeps working for later events.
func TestRingWriteErrorCounted(t *testing.T) {
	r := openTestRing(t, 10)
	r.Record(context.Background(), Event{Reason: string([]byte{0xff})}) // invalid UTF-8 still encodes
	r.Record(context.Background(), ev(1))
	_ = r.Flush()
	// Drop the bucket behind the writer's back: the next batch fails.
	if err := r.db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket(bucketEvents) }); err != nil {
		t.Fatal(err)
	}
	r.Record(context.Background(), ev(2))
	_ = r.Flush()
	if s := r.Stats(); s.Failed != 1 || s.WriteErrors != 1 || s.Written != 2 {
		t.Fatalf("stats %+v", s)
	}
	if _, err := r.Query(context.Background(), Filter{}); err != nil {
		t.Fatal(err)
	}
}

func TestRecordAfterCloseIsDropped(t *testing.T) {
	r, err := OpenRing(filepath.Join(t.TempDir(), "audit.db"), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r.Record(context.Background(), ev(1)) // must not panic
	if r.Dropped() != 1 {
		t.Fatalf("dropped %d", r.Dropped())
	}
	if err := r.Flush(); err != ErrClosed {
		t.Fatalf("flush after close: %v", err)
	}
}

func TestJSONLLinesParse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(path, []byte(`{"kind":"earlier"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	j, err := OpenJSONL(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				j.Record(context.Background(), Event{RequestID: fmt.Sprintf("w%d-%d", w, i), Kind: KindToolCall,
					Reason: "line\nbreak \u2028 inside", Verdict: VerdictBlocked}.WithArguments([]byte(`{"x":1}`), false))
			}
		}()
	}
	wg.Wait()
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		if n == 1 {
			if sc.Text() != `{"kind":"earlier"}` {
				t.Fatalf("existing content changed: %q", sc.Text())
			}
			continue
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %d does not parse: %v: %q", n, err, sc.Text())
		}
		if e.ArgsSHA256 != ArgsDigest([]byte(`{"x":1}`)) || e.Args != "" {
			t.Fatalf("line %d: arguments: %+v", n, e)
		}
	}
	if want := 1 + 8*50 - int(j.Dropped()); n != want {
		t.Fatalf("%d lines, want %d", n, want)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Fatalf("mode %o", perm)
	}
}

func TestJSONLNewFileMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.jsonl")
	j, err := OpenJSONL(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	j.Record(context.Background(), ev(1))
	if err := j.Flush(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), "\n") || strings.Count(string(b), "\n") != 1 {
		t.Fatalf("content %q", b)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	info, _ := os.Stat(path)
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o", info.Mode().Perm())
	}
}

func TestWithArguments(t *testing.T) {
	e := Event{Tool: "x"}.WithArguments([]byte(`{"q":"secret"}`), false)
	if e.Args != "" || len(e.ArgsSHA256) != 64 {
		t.Fatalf("%+v", e)
	}
	b, _ := json.Marshal(e)
	if strings.Contains(string(b), "secret") || !strings.Contains(string(b), `"argumentsSha256":"`) {
		t.Fatalf("json %s", b)
	}
	if e := (Event{}).WithArguments([]byte(`{"q":1}`), true); e.Args != `{"q":1}` {
		t.Fatalf("%+v", e)
	}
	// Optional fields stay out of the JSON; the contract's fields are always there, with their
	// names.
	b, _ = json.Marshal(Event{Time: time.Unix(0, 0).UTC()})
	if want := `{"time":"1970-01-01T00:00:00Z","requestId":"","kind":"","protocol":"","protocolVersion":0,"tool":"","verdict":"","reason":"","rule":""}`; string(b) != want {
		t.Fatalf("json %s\nwant %s", b, want)
	}
}

// TestQueryFileReadsWithoutWriting: QueryFile reads a closed ring's events as Query does, leaves
// the file byte for byte as it was, creates none where there is none (fs.ErrNotExist), and says
// ErrLocked while a Ring holds the file.
func TestQueryFileReadsWithoutWriting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.db")
	r, err := OpenRing(path, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		r.Record(context.Background(), ev(i))
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := QueryFile(context.Background(), path, Filter{}); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), path) {
		t.Errorf("while the ring is open: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := QueryFile(context.Background(), path, Filter{RequestID: "req-2"})
	if err != nil || ids(got) != "req-2" {
		t.Fatalf("%s %v", ids(got), err)
	}
	if all, err := QueryFile(context.Background(), path, Filter{}); err != nil || ids(all) != "req-3,req-2,req-1" {
		t.Fatalf("%s %v", ids(all), err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("QueryFile changed the file")
	}
	missing := filepath.Join(dir, "none.db")
	if _, err := QueryFile(context.Background(), missing, Filter{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("no file: %v", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Error("QueryFile created a file")
	}
}
