package etcdstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/etcdstore"
	"github.com/promptgate/promptgate/store/etcdstore/etcdtest"
	"github.com/promptgate/promptgate/store/storetest"
)

func TestEtcdConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	var n atomic.Int32
	storetest.Run(t, func(t *testing.T, h storetest.Hooks) store.Store {
		s, err := etcdstore.Open(context.Background(), etcdstore.Options{
			Endpoints: []string{srv.Endpoint()},
			Prefix:    fmt.Sprintf("/conformance/%d", n.Add(1)),
			Validate:  h.Validate,
			Links:     h.Links,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func open(t *testing.T, endpoint, prefix string, mod func(*etcdstore.Options)) *etcdstore.Etcd {
	t.Helper()
	// The dial timeout is generous: the test's etcd runs in this process, which the race detector
	// and a loaded machine slow down; where a test wants a call to a stopped etcd to fail, it
	// bounds that call.
	o := etcdstore.Options{Endpoints: []string{endpoint}, Prefix: prefix, ProbeInterval: 100 * time.Millisecond, DialTimeout: 30 * time.Second}
	if mod != nil {
		mod(&o)
	}
	s, err := etcdstore.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// eventually polls cond until it holds, or fails after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRemoteChangesReachWatchers(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	a := open(t, srv.Endpoint(), "/fleet", nil)
	b := open(t, srv.Endpoint(), "/fleet/", nil)
	c := open(t, srv.Endpoint(), "/other", nil)
	var nb, nc atomic.Int32
	b.Watch(func() { nb.Add(1) })
	c.Watch(func() { nc.Add(1) })
	v, err := a.AddVersion(ctx, store.KindTemplate, []byte(`{"name":"t","text":"x"}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Activate(ctx, store.KindTemplate, "t", v); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's watcher", func() bool {
		rec, err := b.Active(ctx, store.KindTemplate, "t")
		return nb.Load() > 0 && err == nil && rec.Version == v
	})
	if nc.Load() != 0 {
		t.Fatal("a change under /fleet/ reached a watcher of /other/")
	}
}

// A protocol version put in shadow on one instance reaches another's watchers and snapshot, and the
// snapshot file keeps it for a start while etcd is down.
func TestShadowReachesTheFleetAndTheSnapshotFile(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "snap.json")
	a := open(t, srv.Endpoint(), "/fleet", nil)
	b := open(t, srv.Endpoint(), "/fleet", func(o *etcdstore.Options) { o.SnapshotFile = file })
	var nb atomic.Int32
	b.Watch(func() { nb.Add(1) })
	v, err := a.AddVersion(ctx, store.KindProtocol, []byte(`{"id":"tech","description":"stricter"}`), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.SetShadow(ctx, "tech", v); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b's watcher and snapshot", func() bool {
		snap, err := b.Snapshot(ctx)
		return nb.Load() > 0 && err == nil && snap.Shadows["tech"].Version == v && snap.Protocols["tech"].Version == 1
	})
	got, err := etcdstore.ReadSnapshotFile(file, "/fleet/", func(k store.Kind, body []byte) (string, error) { return store.CheckStructure(k, body) })
	if err != nil || got.Shadows["tech"].Version != v {
		t.Fatalf("snapshot file: %+v %v", got.Shadows, err)
	}
}

func TestDisconnectResyncAndSnapshotFile(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "snap.json")
	var states []string
	var mu sync.Mutex
	s := open(t, srv.Endpoint(), "/p", func(o *etcdstore.Options) {
		o.SnapshotFile = file
		o.OnState = func(ok bool, reason string) {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, fmt.Sprintf("%v %s", ok, reason))
		}
	})
	pins := []byte(`{"server":"crm","tools":[{"name":"lookup","description":"Looks up."}]}`)
	if v, err := s.AddVersion(ctx, store.KindMCPPins, pins, "first-list", ""); err != nil {
		t.Fatal(err)
	} else if _, err := s.Activate(ctx, store.KindMCPPins, "crm", v); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("snapshot file not written: %v", err)
	}
	var calls atomic.Int32
	s.Watch(func() { calls.Add(1) })
	srv.Stop()
	eventually(t, "disconnected", func() bool { ok, _ := s.Connected(); return !ok })
	if _, reason := s.Connected(); !strings.Contains(reason, srv.HostPort()) {
		t.Errorf("reason %q does not name the endpoint", reason)
	}
	downCtx, cancelDown := context.WithTimeout(ctx, 2*time.Second)
	_, err := s.Snapshot(downCtx)
	cancelDown()
	if err == nil {
		t.Fatal("Snapshot while etcd is down must fail (callers keep their last one)")
	}
	before := calls.Load()
	srv.Restart()
	eventually(t, "reconnected", func() bool { ok, _ := s.Connected(); return ok })
	if calls.Load() == before {
		t.Fatal("reconnect did not call the watchers (resync)")
	}
	mu.Lock()
	if len(states) < 2 || !strings.HasPrefix(states[0], "false") || states[len(states)-1] != "true " {
		t.Errorf("states %q", states)
	}
	mu.Unlock()

	// Start with etcd down: the snapshot file is served; without it, a clear error.
	srv.Stop()
	down := func(o *etcdstore.Options) { o.SnapshotFile = file }
	o := etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: "/p", DialTimeout: 300 * time.Millisecond}
	down(&o)
	s2, err := etcdstore.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	snap, err := s2.Snapshot(ctx)
	var compact bytes.Buffer
	_ = json.Compact(&compact, snap.MCPPins["crm"].Body)
	if err != nil || len(snap.Protocols) == 0 || compact.String() != string(pins) {
		t.Fatalf("snapshot from file: %v %d protocols, pins %+v", err, len(snap.Protocols), snap.MCPPins)
	}
	if ok, _ := s2.Connected(); ok {
		t.Fatal("started from the file but says connected")
	}
	o.SnapshotFile = ""
	if _, err := etcdstore.Open(ctx, o); err == nil || !strings.Contains(err.Error(), srv.HostPort()) || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("no snapshot: %v", err)
	}
	o.Prefix = "/elsewhere"
	o.SnapshotFile = file
	if _, err := etcdstore.Open(ctx, o); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Fatalf("snapshot of another prefix: %v", err)
	}
	o.Prefix = "/p"
	for name, content := range map[string]string{
		"garbage":   "{not json",
		"format":    `{"format":"x","prefix":"/p/"}`,
		"empty":     `{"format":"promptgate-etcd-snapshot/1","prefix":"/p/","templates":[],"protocols":[]}`,
		"bad body":  `{"format":"promptgate-etcd-snapshot/1","prefix":"/p/","templates":[{"name":"a","version":1,"body":{"name":"a"}}]}`,
		"name skew": `{"format":"promptgate-etcd-snapshot/1","prefix":"/p/","templates":[{"name":"b","version":1,"body":{"name":"a","text":""}}]}`,
		"pin set skew": `{"format":"promptgate-etcd-snapshot/1","prefix":"/p/","templates":[{"name":"a","version":1,"body":{"name":"a","text":""}}],` +
			`"mcppins":[{"name":"crm","version":1,"body":{"server":"other","tools":[]}}]}`,
	} {
		bad := filepath.Join(t.TempDir(), "bad.json")
		_ = os.WriteFile(bad, []byte(content), 0o600)
		o.SnapshotFile = bad
		if _, err := etcdstore.Open(ctx, o); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestOpenRefusesBadOptions(t *testing.T) {
	ctx := context.Background()
	if _, err := etcdstore.Open(ctx, etcdstore.Options{Prefix: "/x"}); err == nil {
		t.Error("no endpoints accepted")
	}
	if _, err := etcdstore.Open(ctx, etcdstore.Options{Endpoints: []string{"http://127.0.0.1:1"}, Prefix: "/"}); err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Errorf("root prefix: %v", err)
	}
}

func TestCopyBoltToEtcdAndBack(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	b, err := store.Open(filepath.Join(t.TempDir(), "a.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, _ = b.AddVersion(ctx, store.KindTemplate, []byte(`{"name":"z", "text":"1"}`), "me", "n")
	_, _ = b.Activate(ctx, store.KindTemplate, "z", 1)
	_ = b.SetToolEnabled(ctx, "shell", false, "ops")
	d, err := b.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := open(t, srv.Endpoint(), "/copy", func(o *etcdstore.Options) { o.NoSeed = true })
	if empty, err := e.Empty(ctx); err != nil || !empty {
		t.Fatalf("fresh prefix not empty: %v", err)
	}
	if err := e.Import(ctx, d); err != nil {
		t.Fatal(err)
	}
	d2, err := e.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b2, err := store.Open(filepath.Join(t.TempDir(), "b.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if err := b2.Import(ctx, d2); err != nil {
		t.Fatal(err)
	}
	d3, err := b2.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d, d2) || !reflect.DeepEqual(d, d3) {
		t.Fatalf("copy changed the data:\n%+v\n%+v\n%+v", d, d2, d3)
	}
}
