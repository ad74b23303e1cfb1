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

// flakyStore is a real store whose Snapshot fails while failing is set, as an etcd that blinks would.
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

// TestDefinitionsReloadRetried: a change whose reload fails keeps the previous snapshot in service and says
// so (Stale), and the reload is retried until it succeeds — without waiting for another change.
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
