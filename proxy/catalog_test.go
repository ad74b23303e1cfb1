package proxy

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/promptgate/promptgate/store"
)

// flakyStore is a real store whose Snapshot fails while failing is set, as an etcd that blinks
// would.
type flakyStore struct {
	store.Store
	failing atomic.Bool
	reads   atomic.Int64
}

var errBlink = errors.New("store blinked")

func (f *flakyStore) Snapshot(ctx context.Context) (store.Snapshot, error) {
	f.reads.Add(1)
	if f.failing.Load() {
		return store.Snapshot{}, errBlink
	}
	return f.Store.Snapshot(ctx)
}

// TestDefinitionsReloadRetried: a change whose reload fails keeps the previous snapshot in service
// and says so (Stale), and the reload is retried until it succeeds — without waiting for another
// change.
func TestDefinitionsReloadRetried(t *testing.T) {
	ctx := context.Background()
	st := &flakyStore{Store: testStore(t)}
	defs, err := NewDefinitions(ctx, st, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(defs.Close)
	if s := defs.Stale(); s != "" {
		t.Fatalf("stale at start: %s", s)
	}
	if _, ok := defs.snapshot().tools["web_fetch"]; ok {
		t.Fatal("override before the change")
	}

	st.failing.Store(true)
	if err := st.SetToolEnabled(ctx, "web_fetch", false, "test"); err != nil {
		t.Fatal(err)
	}
	if _, ok := defs.snapshot().tools["web_fetch"]; ok {
		t.Fatal("a failed reload changed the snapshot in service")
	}
	if s := defs.Stale(); !strings.Contains(s, "store blinked") || !strings.Contains(s, "serving the previous snapshot") {
		t.Fatalf("Stale() = %q", s)
	}
	// Retried while failing (backoff), and then taken up once the store answers again.
	for deadline := time.Now().Add(20 * time.Second); st.reads.Load() < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("reload not retried: %d reads", st.reads.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	st.failing.Store(false)
	for deadline := time.Now().Add(30 * time.Second); ; {
		if o, ok := defs.snapshot().tools["web_fetch"]; ok && !o.Enabled && defs.Stale() == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("change not taken up after the store came back: stale %q", defs.Stale())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Close stops the loop (idempotently).
	defs.Close()
	defs.Close()
}

// TestDefinitionsFirstLoadFails: without a first snapshot there is no policy: NewDefinitions fails.
func TestDefinitionsFirstLoadFails(t *testing.T) {
	st := &flakyStore{Store: testStore(t)}
	st.failing.Store(true)
	if _, err := NewDefinitions(context.Background(), st, slog.New(slog.DiscardHandler)); !errors.Is(err, errBlink) {
		t.Fatalf("err %v", err)
	}
}

// lackingStore is a real store whose snapshots lack the template named by lack (when set), as a DB
// that never had it would.
type lackingStore struct {
	store.Store
	lack atomic.Pointer[string]
}

func (l *lackingStore) Snapshot(ctx context.Context) (store.Snapshot, error) {
	snap, err := l.Store.Snapshot(ctx)
	if name := l.lack.Load(); name != nil && err == nil {
		delete(snap.Templates, *name)
	}
	return snap, err
}

// TestTemplateFallbackLoggedOnce: the embedded copy of a template the DB lacks is logged when it
// starts being used, not on every request, across reloads that change nothing about it; once the DB
// has the template again that is logged too, and a later lack is logged anew.
func TestTemplateFallbackLoggedOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const name = "base_tool_call_v2"
	st := &lackingStore{Store: testStore(t)}
	missing := name
	st.lack.Store(&missing)
	var logs syncBuffer
	defs, err := NewDefinitions(ctx, st, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(defs.Close)
	requests := func(n int) {
		t.Helper()
		for range n {
			tm, err := defs.template(defs.snapshot(), name)
			if err != nil || tm.Version != 0 {
				t.Fatalf("template %v %v", tm, err)
			}
		}
	}
	count := func(msg string) int { return strings.Count(logs.String(), msg) }
	const warn, back = "using the copy embedded in the binary", "found in the DB again"

	requests(50)
	if n := count(warn); n != 1 {
		t.Fatalf("%d warnings after 50 requests, want 1:\n%s", n, logs.String())
	}
	// A reload for an unrelated change: still missing, nothing new to say.
	if err := st.SetToolEnabled(ctx, "web_fetch", false, "test"); err != nil {
		t.Fatal(err)
	}
	requests(50)
	if n := count(warn); n != 1 {
		t.Fatalf("%d warnings after a reload that changed nothing about the template, want 1", n)
	}
	st.lack.Store(nil)
	if err := st.ClearToolEnabled(ctx, "web_fetch"); err != nil {
		t.Fatal(err)
	}
	if tm, err := defs.template(defs.snapshot(), name); err != nil || tm.Version != 1 || count(back) != 1 {
		t.Fatalf("back in the DB: %v %v, %d info lines", tm, err, count(back))
	}
	st.lack.Store(&missing)
	if err := st.SetToolEnabled(ctx, "web_fetch", true, "test"); err != nil {
		t.Fatal(err)
	}
	requests(10)
	if n := count(warn); n != 2 {
		t.Fatalf("%d warnings after the template went missing again, want 2", n)
	}
}
