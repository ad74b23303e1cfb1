package etcdstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/etcdstore"
	"github.com/promptgate/promptgate/store/etcdstore/etcdtest"
)

// raw is a plain etcd client, to write keys as another release (or another program) would.
func raw(t *testing.T, srv *etcdtest.Server) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.Endpoint()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func openPrefixErr(endpoint, prefix string, noSeed bool) error {
	s, err := etcdstore.Open(context.Background(), etcdstore.Options{Endpoints: []string{endpoint}, Prefix: prefix, DialTimeout: 2 * time.Second, NoSeed: noSeed})
	if err == nil {
		_ = s.Close()
	}
	return err
}

func TestNestedPrefixesRefused(t *testing.T) {
	srv := etcdtest.Start(t)
	open(t, srv.Endpoint(), "/pg", nil)
	for _, inner := range []string{"/pg/team", "/pg/team/eu", "/pg/tools"} {
		for _, noSeed := range []bool{false, true} { // serve, and `store copy --to`
			err := openPrefixErr(srv.Endpoint(), inner, noSeed)
			if err == nil || !strings.Contains(err.Error(), "lies inside /pg/") || !strings.Contains(err.Error(), "must not nest") {
				t.Errorf("%s (noSeed %v) inside /pg/: %v", inner, noSeed, err)
			}
		}
	}
	// The other order: the inner fleet exists first, then the outer one is refused.
	open(t, srv.Endpoint(), "/org/team", nil)
	err := openPrefixErr(srv.Endpoint(), "/org", false)
	if err == nil || !strings.Contains(err.Error(), "/org/team/") || !strings.Contains(err.Error(), "must not nest") {
		t.Errorf("/org holding /org/team: %v", err)
	}
	// Keys of another program under a prefix are refused the same way; neighbours are fine.
	if _, err := raw(t, srv).Put(context.Background(), "/mixed/unrelated", "x"); err != nil {
		t.Fatal(err)
	}
	if err := openPrefixErr(srv.Endpoint(), "/mixed", false); err == nil || !strings.Contains(err.Error(), "/mixed/unrelated") {
		t.Errorf("foreign key: %v", err)
	}
	for _, ok := range []string{"/pg-team", "/pgx", "/org-team"} {
		if err := openPrefixErr(srv.Endpoint(), ok, false); err != nil {
			t.Errorf("%s beside the others: %v", ok, err)
		}
	}
	// Nothing was written under a refused prefix.
	r, err := raw(t, srv).Get(context.Background(), "/pg/team/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || r.Count != 0 {
		t.Fatalf("refused prefix got keys: %d %v", r.Count, err)
	}
}

// writeLayout1 writes, as a release with etcd layout 1 did, two names: t (versions 1..3, 3 active
// after 1 and 2) and p (version 1 active), and one applied rollout.
func writeLayout1(t *testing.T, cli *clientv3.Client, p string) {
	t.Helper()
	num := func(v int) string { return fmt.Sprintf("%020d", v) }
	info := func(v int) string {
		return fmt.Sprintf(`{"version":%d,"createdAt":"2026-01-02T03:04:05Z","author":"ann","note":"n%d"}`, v, v)
	}
	kv := map[string]string{
		"schema":                         "1",
		"createdAt":                      "2026-01-02T03:04:05Z",
		"seq/templates/t":                "3",
		"active/templates/t":             "3",
		"history/templates/t":            "[1,2]",
		"seq/protocols/p":                "1",
		"active/protocols/p":             "1",
		"versions/protocols/p/" + num(1): `{"id":"p"}`,
		"info/protocols/p/" + num(1):     info(1),
		"rolloutseq":                     "1",
		"rollouts/" + num(1):             `{"id":"r1","appliedAt":"2026-01-02T03:04:05Z","previous":{"templates/t":2},"activated":{"templates/t":3}}`,
		"rolloutids/r1":                  "1",
	}
	for v := 1; v <= 3; v++ {
		kv["versions/templates/t/"+num(v)] = fmt.Sprintf(`{"name":"t","text":"v%d"}`, v)
		kv["info/templates/t/"+num(v)] = info(v)
	}
	var ops []clientv3.Op
	for k, v := range kv {
		ops = append(ops, clientv3.OpPut(p+k, v))
	}
	if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestLayout1IsReadAndMigrated(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	cli := raw(t, srv)
	writeLayout1(t, cli, "/old/")

	// store copy reads a layout-1 prefix as it is (no migration on the source side).
	src := open(t, srv.Endpoint(), "/old", func(o *etcdstore.Options) { o.NoSeed = true })
	d, err := src.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Defs) != 2 || d.Defs[0].Name != "t" || d.Defs[0].Active != 3 || !reflect.DeepEqual(d.Defs[0].History, []int{1, 2}) || d.Defs[1].Active != 1 {
		t.Fatalf("export of layout 1: %+v", d.Defs)
	}

	// serve migrates it on start, in one transaction, keeping every pointer and history.
	s := open(t, srv.Endpoint(), "/old", nil)
	if r, _ := cli.Get(ctx, "/old/schema"); len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "2" {
		t.Fatalf("schema after migration: %v", r.Kvs)
	}
	if rec, err := s.Active(ctx, store.KindTemplate, "t"); err != nil || rec.Version != 3 || string(rec.Body) != `{"name":"t","text":"v3"}` {
		t.Fatalf("active after migration: %+v %v", rec, err)
	}
	d2, err := s.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(d, d2) {
		t.Fatalf("migration changed the content:\n%+v\n%+v", d, d2)
	}
	// The layout-1 keys stay, frozen, for instances of the older release still running.
	if r, _ := cli.Get(ctx, "/old/active/templates/t"); len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "3" {
		t.Fatalf("layout-1 pointer: %v", r.Kvs)
	}
	if _, err := s.RevertLast(ctx); err != nil {
		t.Fatal(err)
	}
	if to, from, err := s.Rollback(ctx, store.KindTemplate, "t"); err != nil || to != 1 || from != 2 {
		t.Fatalf("history after migration and revert: %d %d %v", to, from, err)
	}
	// The frozen keys are ignored from now on (not read as the truth, not exported).
	if r, _ := cli.Get(ctx, "/old/active/templates/t"); len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "3" {
		t.Fatalf("layout-1 pointer was rewritten: %v", r.Kvs)
	}
	if d3, err := s.Export(ctx); err != nil || d3.Defs[0].Active != 1 {
		t.Fatalf("export after migration: %v %+v", err, d3)
	}
	// A second instance finds it migrated.
	s2 := open(t, srv.Endpoint(), "/old", nil)
	if rec, err := s2.Active(ctx, store.KindTemplate, "t"); err != nil || rec.Version != 1 {
		t.Fatalf("second instance: %+v %v", rec, err)
	}
	// A schema from the future, and one that is not a number, are refused.
	for _, bad := range []string{"3", "x"} {
		if _, err := cli.Put(ctx, "/future/schema", bad); err != nil {
			t.Fatal(err)
		}
		if err := openPrefixErr(srv.Endpoint(), "/future", false); err == nil || !strings.Contains(err.Error(), "schema version") {
			t.Errorf("schema %q: %v", bad, err)
		}
	}
	// A corrupt active set is an error naming the key, not an empty fleet.
	if _, err := cli.Put(ctx, "/old/activeset", "{not json"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Snapshot(ctx); err == nil || !strings.Contains(err.Error(), "/old/activeset") {
		t.Fatalf("corrupt active set: %v", err)
	}
	if _, err := s.Activate(ctx, store.KindTemplate, "t", 2); err == nil || !strings.Contains(err.Error(), "/old/activeset") {
		t.Fatalf("activate over a corrupt active set: %v", err)
	}
}

// bigDump is a bbolt store's dump with n extra templates, each with two versions.
func bigDump(t *testing.T, n int) *store.Dump {
	t.Helper()
	ctx := context.Background()
	b, err := store.Open(filepath.Join(t.TempDir(), "big.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := store.Rollout{ID: "bulk"}
	for i := range n {
		r.Templates = append(r.Templates, json.RawMessage(fmt.Sprintf(`{"name":"bulk%03d","text":"one"}`, i)))
	}
	if err := b.ApplyRollout(ctx, r); err != nil {
		t.Fatal(err)
	}
	r.ID = "bulk2"
	for i := range r.Templates {
		r.Templates[i] = json.RawMessage(fmt.Sprintf(`{"name":"bulk%03d","text":"two"}`, i))
	}
	if err := b.ApplyRollout(ctx, r); err != nil {
		t.Fatal(err)
	}
	d, err := b.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func activeVersions(s store.Snapshot) map[string]int {
	out := map[string]int{}
	for _, k := range store.Kinds() {
		for n, r := range s.Of(k) {
			out[store.Key(k, n)] = r.Version
		}
	}
	return out
}

func TestImportIsAllOrNothingForReaders(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	d := bigDump(t, 120) // ~750 keys: 8 transactions
	serving := open(t, srv.Endpoint(), "/dst", nil)
	old, err := serving.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldV := activeVersions(old)
	want := map[string]int{}
	for _, def := range d.Defs {
		if def.Active != 0 {
			want[store.Key(def.Kind, def.Name)] = def.Active
		}
	}
	var (
		mu   sync.Mutex
		seen []string
		stop = make(chan struct{})
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			snap, err := serving.Snapshot(ctx)
			if err != nil {
				continue // during the copy: the instance keeps its last snapshot (degraded)
			}
			v := activeVersions(snap)
			if !reflect.DeepEqual(v, oldV) && !reflect.DeepEqual(v, want) {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("a snapshot with %d active names (old %d, new %d)", len(v), len(oldV), len(want)))
				mu.Unlock()
				return
			}
		}
	}()
	dst := open(t, srv.Endpoint(), "/dst", func(o *etcdstore.Options) { o.NoSeed = true })
	err = dst.Import(ctx, d)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) > 0 {
		t.Fatal(seen)
	}
	snap, err := serving.Snapshot(ctx)
	if err != nil || !reflect.DeepEqual(activeVersions(snap), want) {
		t.Fatalf("after the copy: %v", err)
	}
	got, err := dst.Export(ctx)
	if err != nil || !reflect.DeepEqual(got, d) {
		t.Fatalf("copy differs: %v", err)
	}
}

func TestInterruptedCopyIsRefusedThenResumed(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	cli := raw(t, srv)
	// What an interrupted copy leaves: the marker and some keys, no schema.
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut("/half/copying", `{"startedAt":"2026-01-01T00:00:00Z"}`), clientv3.OpPut("/half/seq/templates/x", "1")).Commit(); err != nil {
		t.Fatal(err)
	}
	err := openPrefixErr(srv.Endpoint(), "/half", false)
	if err == nil || !strings.Contains(err.Error(), "store copy") || !strings.Contains(err.Error(), "/half/copying") {
		t.Fatalf("serve on an interrupted copy must not seed it: %v", err)
	}
	dst := open(t, srv.Endpoint(), "/half", func(o *etcdstore.Options) { o.NoSeed = true })
	if _, err := dst.Export(ctx); err == nil || !strings.Contains(err.Error(), "store copy") {
		t.Fatalf("export of an interrupted copy: %v", err)
	}
	if in, err := dst.Interrupted(ctx); err != nil || !in {
		t.Fatalf("Interrupted: %v %v", in, err)
	}
	d := bigDump(t, 3)
	if err := dst.Import(ctx, d); err != nil {
		t.Fatal(err)
	}
	if in, err := dst.Interrupted(ctx); err != nil || in {
		t.Fatalf("Interrupted after the copy: %v %v", in, err)
	}
	s := open(t, srv.Endpoint(), "/half", nil)
	if rec, err := s.Active(ctx, store.KindTemplate, "bulk002"); err != nil || rec.Version != 2 {
		t.Fatalf("after resuming: %+v %v", rec, err)
	}
	if _, err := s.Active(ctx, store.KindTemplate, "x"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the interrupted copy's keys stayed: %v", err)
	}
	// A seeded prefix is not an interrupted copy.
	if in, err := s.Interrupted(ctx); err != nil || in {
		t.Fatalf("Interrupted on a live prefix: %v %v", in, err)
	}
}

func rolloutOf(id, text string, n int) store.Rollout {
	r := store.Rollout{ID: id}
	for i := range n {
		r.Templates = append(r.Templates, json.RawMessage(fmt.Sprintf(`{"name":"many%03d","text":%q}`, i, text)))
	}
	return r
}

// TestLargeRolloutReachesAnotherInstanceWhole: a rollout of 100 definitions (500 keys' worth in
// layout 1) lands on another instance through its watch in one piece.
func TestLargeRolloutReachesAnotherInstanceWhole(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	a := open(t, srv.Endpoint(), "/big", nil)
	b := open(t, srv.Endpoint(), "/big", nil)
	const n = 100
	var (
		mu   sync.Mutex
		seen []int
	)
	b.Watch(func() {
		snap, err := b.Snapshot(ctx)
		if err != nil {
			return
		}
		k := 0
		for i := range n {
			if _, ok := snap.Templates[fmt.Sprintf("many%03d", i)]; ok {
				k++
			}
		}
		mu.Lock()
		seen = append(seen, k)
		mu.Unlock()
	})
	if err := a.ApplyRollout(ctx, rolloutOf("many", "one", n)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b sees the rollout", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0 && seen[len(seen)-1] == n
	})
	mu.Lock()
	defer mu.Unlock()
	for _, k := range seen {
		if k != 0 && k != n {
			t.Fatalf("a watcher saw %d of %d definitions: %v", k, n, seen)
		}
	}
}

// TestConcurrentRolloutsKeepHistory: two instances apply different rollouts over the same 50 names
// at once, and the same rollout id at once: every rollout is applied exactly once, and reverting
// walks back to the start, nothing lost.
func TestConcurrentRolloutsKeepHistory(t *testing.T) {
	srv := etcdtest.Start(t)
	ctx := context.Background()
	a := open(t, srv.Endpoint(), "/race", nil)
	b := open(t, srv.Endpoint(), "/race", nil)
	const n = 50
	if err := a.ApplyRollout(ctx, rolloutOf("base", "base", n)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i, c := range []struct {
		s *etcdstore.Etcd
		r store.Rollout
	}{{a, rolloutOf("ra", "a", n)}, {b, rolloutOf("rb", "b", n)}, {a, rolloutOf("same", "s1", n)}, {b, rolloutOf("same", "s2", n)}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.s.ApplyRollout(ctx, c.r)
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs[0], errs[1])
	}
	if (errs[2] == nil) == (errs[3] == nil) {
		t.Fatalf("the same rollout applied twice at once: want exactly one success: %v / %v", errs[2], errs[3])
	}
	for _, err := range errs[2:] {
		if err != nil && !errors.Is(err, store.ErrAlreadyApplied) {
			t.Fatalf("loser of the same id: %v", err)
		}
	}
	rs, err := a.Rollouts(ctx)
	if err != nil || len(rs) != 4 {
		t.Fatalf("rollouts %d %v", len(rs), err)
	}
	// The applied rollouts chain: each one's previous versions are the versions the one before
	// activated.
	for i := 1; i < len(rs); i++ {
		for key, prev := range rs[i].Previous {
			if rs[i-1].Activated[key] != prev {
				t.Fatalf("rollout %s replaced %s@%d, but %s had activated %d", rs[i].ID, key, prev, rs[i-1].ID, rs[i-1].Activated[key])
			}
		}
	}
	for range 4 {
		if _, err := b.RevertLast(ctx); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := a.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, ok := snap.Templates[fmt.Sprintf("many%03d", i)]; ok {
			t.Fatalf("many%03d still active after reverting everything", i)
		}
	}
	// The loser's versions, when it got as far as storing them (it lost the final compare-and-swap
	// rather than the first check), stay inactive, noted with the rollout id (documented; not
	// garbage-collected).
	e, err := a.Entry(ctx, store.KindTemplate, "many000")
	if err != nil || e.Active != 0 {
		t.Fatalf("many000: %+v %v", e, err)
	}
	same := 0
	for _, v := range e.Versions {
		if v.Note == "same" {
			same++
		}
	}
	if same < 1 || same > 2 || len(e.Versions) != 3+same {
		t.Fatalf("many000 versions %+v: want base, ra, rb and one or two of 'same'", e.Versions)
	}
}
