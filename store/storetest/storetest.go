// Package storetest is the conformance suite of store.Store: every backend (bbolt, etcd) runs it,
// so that they cannot drift apart. Run calls a factory for each sub-test and checks the observable
// behaviour the Store interface documents.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/builtin"
)

// Open returns a new, empty (freshly seeded) store with the hooks installed, closed by the caller's
// test cleanup.
type Open func(t *testing.T, h Hooks) store.Store

// Hooks are the store's hooks a sub-test installs; nil ones are left out.
type Hooks struct {
	// Validate is store.Options.Validate.
	Validate func(store.Kind, string, []byte) error
	// Links is store.Options.Links.
	Links store.LinksFunc
}

// Dumper is what a backend offers to `store copy`.
type Dumper interface {
	Export(ctx context.Context) (*store.Dump, error)
	Import(ctx context.Context, d *store.Dump) error
}

func tpl(name, text string) []byte {
	b, _ := json.Marshal(map[string]string{"name": name, "text": text})
	return b
}

// Run runs every conformance test against the stores open returns.
func Run(t *testing.T, open Open) {
	ctx := context.Background()
	t.Run("Seeded", func(t *testing.T) {
		s := open(t, Hooks{})
		for kind, defs := range map[store.Kind][]builtin.Definition{store.KindTemplate: builtin.Templates(), store.KindProtocol: builtin.Protocols()} {
			entries, err := s.List(ctx, kind)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != len(defs) {
				t.Fatalf("%s: %d entries, want %d built-ins", kind, len(entries), len(defs))
			}
			if !sort.SliceIsSorted(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name }) {
				t.Errorf("%s: list not sorted", kind)
			}
			for _, d := range defs {
				rec, err := s.Active(ctx, kind, d.Name)
				if err != nil {
					t.Fatal(err)
				}
				if rec.Version != 1 || rec.Author != store.BuiltinAuthor || string(rec.Body) != string(d.Body) {
					t.Errorf("%s/%s: %+v", kind, d.Name, rec)
				}
			}
		}
		snap, err := s.Snapshot(ctx)
		if err != nil || len(snap.Templates) != len(builtin.Templates()) || len(snap.Protocols) != len(builtin.Protocols()) {
			t.Fatalf("snapshot %v: %d %d", err, len(snap.Templates), len(snap.Protocols))
		}
	})

	t.Run("VersionsImmutableAndIncreasing", func(t *testing.T) {
		s := open(t, Hooks{})
		body1 := []byte(`{"name":"x_tpl","text":"one",  "extra": [1, 2]}`)
		v1, err := s.AddVersion(ctx, store.KindTemplate, body1, "ann", "first")
		if err != nil || v1 != 1 {
			t.Fatalf("v1 %d %v", v1, err)
		}
		body1[len(body1)-2] = '9' // the store kept its own copy
		v2, err := s.AddVersion(ctx, store.KindTemplate, tpl("x_tpl", "two"), "bob", "second")
		if err != nil || v2 != 2 {
			t.Fatalf("v2 %d %v", v2, err)
		}
		rec, err := s.Get(ctx, store.KindTemplate, "x_tpl", 1)
		if err != nil || string(rec.Body) != `{"name":"x_tpl","text":"one",  "extra": [1, 2]}` || rec.Author != "ann" || rec.Note != "first" || rec.Version != 1 {
			t.Fatalf("get v1: %+v %v", rec, err)
		}
		if _, err := s.Active(ctx, store.KindTemplate, "x_tpl"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("not activated yet: %v", err)
		}
		e, err := s.Entry(ctx, store.KindTemplate, "x_tpl")
		if err != nil || e.Active != 0 || len(e.Versions) != 2 || e.Versions[0].Version != 1 || e.Versions[1].Author != "bob" {
			t.Fatalf("entry %+v %v", e, err)
		}
		for _, c := range []struct {
			name string
			v    int
		}{{"x_tpl", 3}, {"x_tpl", 0}, {"nope", 1}, {"../bad", 1}} {
			if _, err := s.Get(ctx, store.KindTemplate, c.name, c.v); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("get %s@%d: %v", c.name, c.v, err)
			}
		}
		if _, err := s.Entry(ctx, store.KindTemplate, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("entry of unknown: %v", err)
		}
		if _, err := s.List(ctx, store.Kind("widgets")); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("unknown kind: %v", err)
		}
	})

	t.Run("ActivateAndRollback", func(t *testing.T) {
		s := open(t, Hooks{})
		for i := 1; i <= 3; i++ {
			if _, err := s.AddVersion(ctx, store.KindTemplate, tpl("r", fmt.Sprint(i)), "", ""); err != nil {
				t.Fatal(err)
			}
		}
		for _, v := range []int{1, 2, 3, 3} {
			if _, err := s.Activate(ctx, store.KindTemplate, "r", v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Activate(ctx, store.KindTemplate, "r", 4); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("activate missing version: %v", err)
		}
		if _, err := s.Activate(ctx, store.KindTemplate, "nope", 1); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("activate missing name: %v", err)
		}
		// Entry and List name the version Rollback is about to re-activate, and 0 once there is
		// none.
		rollbackTo := func() (int, int) {
			t.Helper()
			e, err := s.Entry(ctx, store.KindTemplate, "r")
			if err != nil {
				t.Fatal(err)
			}
			all, err := s.List(ctx, store.KindTemplate)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range all {
				if l.Name == "r" {
					return e.RollbackTo, l.RollbackTo
				}
			}
			t.Fatal("r is not listed")
			return 0, 0
		}
		for _, want := range []int{2, 1} {
			if e, l := rollbackTo(); e != want || l != want {
				t.Fatalf("before rollback: Entry.RollbackTo %d, List %d, want %d", e, l, want)
			}
			v, _, err := s.Rollback(ctx, store.KindTemplate, "r")
			if err != nil || v != want {
				t.Fatalf("rollback: %d %v, want %d", v, err, want)
			}
			rec, _ := s.Active(ctx, store.KindTemplate, "r")
			if rec.Version != want {
				t.Fatalf("active %d after rollback, want %d", rec.Version, want)
			}
		}
		if e, l := rollbackTo(); e != 0 || l != 0 {
			t.Fatalf("at the start: Entry.RollbackTo %d, List %d, want 0", e, l)
		}
		if _, _, err := s.Rollback(ctx, store.KindTemplate, "r"); !errors.Is(err, store.ErrNoPreviousVersion) {
			t.Fatalf("rollback past the start: %v", err)
		}
		if _, _, err := s.Rollback(ctx, store.KindTemplate, "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("rollback of unknown: %v", err)
		}
	})

	t.Run("StructuralChecksAndValidateHook", func(t *testing.T) {
		refuse := errors.New("hook says no")
		s := open(t, Hooks{Validate: func(kind store.Kind, name string, body []byte) error {
			if strings.Contains(string(body), "forbidden") {
				return refuse
			}
			return nil
		}})
		for _, body := range []string{``, `[]`, `{"name":"a"}`, `{"name":"a b","text":""}`, `{"name":"a","text":1}`, `{"name":"a","name":"b","text":""}`, "{\"name\":\"a\",\"text\":\"\xff\"}"} {
			if _, err := s.AddVersion(ctx, store.KindTemplate, []byte(body), "", ""); !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%q: %v", body, err)
			}
		}
		if _, err := s.AddVersion(ctx, store.KindProtocol, []byte(`{"name":"p"}`), "", ""); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("protocol without id: %v", err)
		}
		_, err := s.AddVersion(ctx, store.KindTemplate, tpl("hooked", "forbidden"), "", "")
		if !errors.Is(err, store.ErrInvalid) || !errors.Is(err, refuse) {
			t.Fatalf("hook: %v", err)
		}
		if _, err := s.Entry(ctx, store.KindTemplate, "hooked"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("refused body was stored: %v", err)
		}
		err = s.ApplyRollout(ctx, store.Rollout{ID: "r1", Templates: []json.RawMessage{tpl("ok1", "fine"), tpl("ok2", "forbidden")}})
		if !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("rollout with a refused body: %v", err)
		}
		if _, err := s.Entry(ctx, store.KindTemplate, "ok1"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("part of a refused rollout was stored: %v", err)
		}
		if rs, _ := s.Rollouts(ctx); len(rs) != 0 {
			t.Fatalf("refused rollout recorded: %v", rs)
		}
	})

	t.Run("LinksHook", func(t *testing.T) { linksHook(t, open) })

	t.Run("MCPPinSets", func(t *testing.T) { mcpPinSets(t, open) })

	t.Run("ActivateIfLosesNoUpdate", func(t *testing.T) { activateIf(t, open) })

	t.Run("RolloutUpAndDown", func(t *testing.T) {
		s := open(t, Hooks{})
		before, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.RevertLast(ctx); !errors.Is(err, store.ErrNothingToRevert) {
			t.Fatalf("revert with none: %v", err)
		}
		r := store.Rollout{ID: "001-a", Templates: []json.RawMessage{tpl("base_tool_call_v2", "new base"), tpl("fresh", "new name")}}
		if err := s.ApplyRollout(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := s.ApplyRollout(ctx, r); !errors.Is(err, store.ErrAlreadyApplied) {
			t.Fatalf("second apply: %v", err)
		}
		rec, _ := s.Active(ctx, store.KindTemplate, "base_tool_call_v2")
		if rec.Version != 2 || rec.Author != store.RolloutAuthor || rec.Note != "001-a" || string(rec.Body) != string(tpl("base_tool_call_v2", "new base")) {
			t.Fatalf("after apply: %+v", rec)
		}
		rs, err := s.Rollouts(ctx)
		if err != nil || len(rs) != 1 || rs[0].Previous["templates/base_tool_call_v2"] != 1 || rs[0].Activated["templates/fresh"] != 1 || rs[0].Previous["templates/fresh"] != 0 {
			t.Fatalf("rollouts %+v %v", rs, err)
		}
		ar, err := s.RevertLast(ctx)
		if err != nil || ar.ID != "001-a" {
			t.Fatalf("revert %+v %v", ar, err)
		}
		after, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(versions(before), versions(after)) {
			t.Fatalf("revert did not restore exactly:\n%v\n%v", versions(before), versions(after))
		}
		if _, _, err := s.Rollback(ctx, store.KindTemplate, "base_tool_call_v2"); !errors.Is(err, store.ErrNoPreviousVersion) {
			t.Fatalf("revert left history behind: %v", err)
		}
		if e, _ := s.Entry(ctx, store.KindTemplate, "fresh"); e.Active != 0 || len(e.Versions) != 1 {
			t.Fatalf("stored version must stay, inactive: %+v", e)
		}
		if err := s.ApplyRollout(ctx, r); err != nil {
			t.Fatalf("re-apply after revert: %v", err)
		}
		// Changed by hand since: revert still restores Previous, as a new activation.
		if _, err := s.Activate(ctx, store.KindTemplate, "base_tool_call_v2", 2); err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddVersion(ctx, store.KindTemplate, tpl("base_tool_call_v2", "hand"), "", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Activate(ctx, store.KindTemplate, "base_tool_call_v2", 4); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RevertLast(ctx); err != nil {
			t.Fatal(err)
		}
		if rec, _ := s.Active(ctx, store.KindTemplate, "base_tool_call_v2"); rec.Version != 1 {
			t.Fatalf("revert after a manual change: active %d, want 1", rec.Version)
		}
		if v, _, err := s.Rollback(ctx, store.KindTemplate, "base_tool_call_v2"); err != nil || v != 4 {
			t.Fatalf("rollback to the hand choice: %d %v", v, err)
		}
		bad := store.Rollout{ID: "bad id!", Templates: []json.RawMessage{tpl("a", "b")}}
		if err := s.ApplyRollout(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("bad id: %v", err)
		}
	})

	t.Run("WatchAndTools", func(t *testing.T) {
		s := open(t, Hooks{})
		var n atomic.Int32
		cancel := s.Watch(func() { n.Add(1) })
		if _, err := s.AddVersion(ctx, store.KindTemplate, tpl("w", "1"), "", ""); err != nil {
			t.Fatal(err)
		}
		if n.Load() == 0 {
			t.Fatal("watcher not called before AddVersion returned")
		}
		got := n.Load()
		if err := s.SetToolEnabled(ctx, "shell", false, "ops"); err != nil {
			t.Fatal(err)
		}
		if n.Load() == got {
			t.Fatal("watcher not called for a tool override")
		}
		snap, _ := s.Snapshot(ctx)
		if o, ok := snap.Tools["shell"]; !ok || o.Enabled || o.Author != "ops" {
			t.Fatalf("tools %+v", snap.Tools)
		}
		if err := s.SetToolEnabled(ctx, "", true, ""); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("empty tool name: %v", err)
		}
		if err := s.ClearToolEnabled(ctx, "shell"); err != nil {
			t.Fatal(err)
		}
		if err := s.ClearToolEnabled(ctx, "shell"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("clear twice: %v", err)
		}
		cancel()
		cancel()
		got = n.Load()
		_ = s.SetToolEnabled(ctx, "x", true, "")
		if n.Load() != got {
			t.Fatal("cancelled watcher called")
		}
		cctx, stop := context.WithCancel(ctx)
		stop()
		if _, err := s.Snapshot(cctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled context: %v", err)
		}
	})

	t.Run("ConcurrentWritersLoseNothing", func(t *testing.T) {
		s := open(t, Hooks{})
		const n = 8
		var wg sync.WaitGroup
		vs := make([]int, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				vs[i], errs[i] = s.AddVersion(ctx, store.KindTemplate, tpl("c", fmt.Sprint(i)), "", "")
			}()
		}
		wg.Wait()
		seen := map[int]bool{}
		for i := range n {
			if errs[i] != nil || vs[i] < 1 || vs[i] > n || seen[vs[i]] {
				t.Fatalf("writer %d: version %d %v (all %v)", i, vs[i], errs[i], vs)
			}
			seen[vs[i]] = true
		}
		if _, err := s.Activate(ctx, store.KindTemplate, "c", 1); err != nil {
			t.Fatal(err)
		}
		for i := 2; i <= 3; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.Activate(ctx, store.KindTemplate, "c", i)
			}()
		}
		wg.Wait()
		if errs[2] != nil || errs[3] != nil {
			t.Fatal(errs[2], errs[3])
		}
		rec, _ := s.Active(ctx, store.KindTemplate, "c")
		if rec.Version != 2 && rec.Version != 3 {
			t.Fatalf("active %d", rec.Version)
		}
		other := 5 - rec.Version
		for _, want := range []int{other, 1} {
			if v, _, err := s.Rollback(ctx, store.KindTemplate, "c"); err != nil || v != want {
				t.Fatalf("history lost an activation: rollback %d %v, want %d", v, err, want)
			}
		}
	})

	t.Run("ConcurrentActivationsReturnChainedPrevious", func(t *testing.T) {
		s := open(t, Hooks{})
		const n = 8
		for i := 1; i <= n+1; i++ {
			if _, err := s.AddVersion(ctx, store.KindTemplate, tpl("chain", fmt.Sprint(i)), "", ""); err != nil {
				t.Fatal(err)
			}
		}
		if prev, err := s.Activate(ctx, store.KindTemplate, "chain", 1); err != nil || prev != 0 {
			t.Fatalf("first activation: previous %d %v, want 0", prev, err)
		}
		if prev, err := s.Activate(ctx, store.KindTemplate, "chain", 1); err != nil || prev != 1 {
			t.Fatalf("no-op activation: previous %d %v, want 1 (itself)", prev, err)
		}
		// n writers activate versions 2..n+1 at once: each gets the version its own transaction
		// replaced, so the pairs (previous -> version) form one chain from 1 to the version left
		// active.
		var wg sync.WaitGroup
		prevs := make([]int, n+2)
		errs := make([]error, n+2)
		for v := 2; v <= n+1; v++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				prevs[v], errs[v] = s.Activate(ctx, store.KindTemplate, "chain", v)
			}()
		}
		wg.Wait()
		next := map[int]int{}
		for v := 2; v <= n+1; v++ {
			if errs[v] != nil {
				t.Fatal(errs[v])
			}
			if other, dup := next[prevs[v]]; dup {
				t.Fatalf("versions %d and %d both report %d as previous: a lost activation (previous %v)", other, v, prevs[v], prevs)
			}
			next[prevs[v]] = v
		}
		chain := []int{1}
		for len(chain) <= n {
			v, ok := next[chain[len(chain)-1]]
			if !ok {
				t.Fatalf("chain breaks after %v (previous %v)", chain, prevs)
			}
			chain = append(chain, v)
		}
		rec, err := s.Active(ctx, store.KindTemplate, "chain")
		if err != nil || rec.Version != chain[n] {
			t.Fatalf("active %d %v, want the chain's end %d (chain %v)", rec.Version, err, chain[n], chain)
		}
		// n concurrent rollbacks walk the same chain back: each reports (to, from) of its own
		// transaction.
		tos, froms := make([]int, n), make([]int, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tos[i], froms[i], errs[i] = s.Rollback(ctx, store.KindTemplate, "chain")
			}()
		}
		wg.Wait()
		back := map[int]int{}
		for i := range n {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			back[froms[i]] = tos[i]
		}
		for i := n; i > 0; i-- {
			if back[chain[i]] != chain[i-1] {
				t.Fatalf("rollback from %d went to %d, want %d (chain %v, rollbacks %v -> %v)", chain[i], back[chain[i]], chain[i-1], chain, froms, tos)
			}
		}
		if _, _, err := s.Rollback(ctx, store.KindTemplate, "chain"); !errors.Is(err, store.ErrNoPreviousVersion) {
			t.Fatalf("after walking the chain back: %v", err)
		}
	})

	t.Run("LargeRolloutIsAtomic", func(t *testing.T) {
		s := open(t, Hooks{})
		const n = 60 // 5 keys each: far over etcd's 128 operations per transaction
		r := store.Rollout{ID: "big"}
		for i := range n {
			r.Templates = append(r.Templates, tpl(fmt.Sprintf("big%02d", i), "new"))
		}
		r.Protocols = []json.RawMessage{json.RawMessage(`{"id":"big_proto","allowedTools":[]}`)}
		for i := range n / 2 { // half of them exist already, active at version 1
			v, err := s.AddVersion(ctx, store.KindTemplate, tpl(fmt.Sprintf("big%02d", i), "old"), "", "")
			if err == nil {
				_, err = s.Activate(ctx, store.KindTemplate, fmt.Sprintf("big%02d", i), v)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// A reader sees every name old (or absent) or every name new, never a mix.
		stop := make(chan struct{})
		var mixed atomic.Value
		var reads atomic.Int32
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				snap, err := s.Snapshot(ctx)
				if err != nil {
					mixed.Store(err.Error())
					return
				}
				reads.Add(1)
				news := 0
				for i := range n {
					if rec, ok := snap.Templates[fmt.Sprintf("big%02d", i)]; ok && rec.Note == "big" {
						news++
					}
				}
				if news != 0 && news != n {
					mixed.Store(fmt.Sprintf("a snapshot saw %d of %d definitions of the rollout", news, n))
					return
				}
			}
		}()
		err := s.ApplyRollout(ctx, r)
		for reads.Load() < 2 && mixed.Load() == nil {
			runtime.Gosched()
		}
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if m := mixed.Load(); m != nil {
			t.Fatal(m)
		}
		snap, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			name, want := fmt.Sprintf("big%02d", i), 1
			if i < n/2 {
				want = 2
			}
			if rec := snap.Templates[name]; rec.Version != want || rec.Note != "big" {
				t.Fatalf("%s: %+v, want version %d of the rollout", name, rec, want)
			}
		}
		rs, err := s.Rollouts(ctx)
		if err != nil || len(rs) != 1 || len(rs[0].Activated) != n+1 || rs[0].Previous["templates/big00"] != 1 || rs[0].Previous["templates/big59"] != 0 {
			t.Fatalf("applied rollout %+v %v", rs, err)
		}
		if _, err := s.RevertLast(ctx); err != nil {
			t.Fatal(err)
		}
		snap, _ = s.Snapshot(ctx)
		for i := range n {
			rec, ok := snap.Templates[fmt.Sprintf("big%02d", i)]
			if (i < n/2) != ok || (ok && rec.Version != 1) {
				t.Fatalf("after revert big%02d: %v %+v", i, ok, rec)
			}
		}
		if _, ok := snap.Protocols["big_proto"]; ok {
			t.Fatal("revert left the new protocol active")
		}
	})

	t.Run("ExportImportRoundTrip", func(t *testing.T) {
		a, b := open(t, Hooks{}), open(t, Hooks{})
		da, okA := a.(Dumper)
		db, okB := b.(Dumper)
		if !okA || !okB {
			t.Skip("backend has no Export/Import")
		}
		if err := a.ApplyRollout(ctx, store.Rollout{ID: "r1", Templates: []json.RawMessage{tpl("base_tool_call_v2", "x")}}); err != nil {
			t.Fatal(err)
		}
		_, _ = a.AddVersion(ctx, store.KindTemplate, []byte(`{"text":"spaces  kept", "name":"z"}`), "me", "n")
		_, _ = a.Activate(ctx, store.KindTemplate, "base_tool_call_v2", 1)
		_ = a.SetToolEnabled(ctx, "t", false, "ops")
		if _, err := a.AddVersion(ctx, store.KindProtocol, []byte(`{"id":"tech","description":"shadowed"}`), "", ""); err != nil {
			t.Fatal(err)
		}
		if _, err := a.SetShadow(ctx, "tech", 2); err != nil {
			t.Fatal(err)
		}
		d, err := da.Export(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Import(ctx, d); err != nil {
			t.Fatal(err)
		}
		d2, err := db.Export(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(d, d2) {
			t.Fatalf("round trip differs:\n%+v\n%+v", d, d2)
		}
		if v, _, err := b.Rollback(ctx, store.KindTemplate, "base_tool_call_v2"); err != nil || v != 2 {
			t.Fatalf("history not imported: %d %v", v, err)
		}
		if v, err := b.AddVersion(ctx, store.KindTemplate, tpl("z", "next"), "", ""); err != nil || v != 2 {
			t.Fatalf("counter not imported: %d %v", v, err)
		}
		if _, err := b.RevertLast(ctx); err != nil {
			t.Fatalf("rollout not imported: %v", err)
		}
		if e, err := b.Entry(ctx, store.KindProtocol, "tech"); err != nil || e.Shadow != 2 {
			t.Fatalf("shadow not imported: %+v %v", e, err)
		}
	})

	t.Run("ShadowVersions", func(t *testing.T) { shadowVersions(t, open) })
}

// shadowVersions checks the shadow pointer: set, replaced and cleared in a transaction of its own,
// seen in Entry, List and Snapshot, refused for a version that does not exist or is active, and
// taken away by every change that activates the version in shadow (Activate, Rollback, RevertLast).
func shadowVersions(t *testing.T, open Open) {
	ctx := context.Background()
	s := open(t, Hooks{})
	var notified atomic.Int64
	cancel := s.Watch(func() { notified.Add(1) })
	defer cancel()
	proto := func(d string) []byte { return []byte(`{"id":"sh","description":"` + d + `"}`) }
	for i := 1; i <= 3; i++ {
		if _, err := s.AddVersion(ctx, store.KindProtocol, proto(fmt.Sprint(i)), "", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Activate(ctx, store.KindProtocol, "sh", 1); err != nil {
		t.Fatal(err)
	}
	shadow := func() (entry, list, snap int) {
		t.Helper()
		e, err := s.Entry(ctx, store.KindProtocol, "sh")
		if err != nil {
			t.Fatal(err)
		}
		all, err := s.List(ctx, store.KindProtocol)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range all {
			if l.Name == "sh" {
				list = l.Shadow
			}
		}
		sn, err := s.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rec, ok := sn.Shadows["sh"]; ok {
			if string(rec.Body) != string(proto(fmt.Sprint(rec.Version))) {
				t.Fatalf("snapshot shadow body %s", rec.Body)
			}
			snap = rec.Version
		}
		if sn.Protocols["sh"].Version == snap {
			t.Fatalf("the active version %d is also in shadow", snap)
		}
		return e.Shadow, list, snap
	}
	before := notified.Load()
	if prev, err := s.SetShadow(ctx, "sh", 2); err != nil || prev != 0 {
		t.Fatalf("shadow 2: %d %v", prev, err)
	}
	if e, l, sn := shadow(); e != 2 || l != 2 || sn != 2 {
		t.Fatalf("shadow seen as %d %d %d, want 2", e, l, sn)
	}
	if notified.Load() == before {
		t.Fatal("watchers not told of the shadow")
	}
	for _, c := range []struct {
		name    string
		version int
		want    error
	}{{"sh", 1, store.ErrInvalid}, {"sh", 9, store.ErrNotFound}, {"nope", 1, store.ErrNotFound}, {"../x", 1, store.ErrNotFound}, {"sh", -1, store.ErrNotFound}} {
		if _, err := s.SetShadow(ctx, c.name, c.version); !errors.Is(err, c.want) {
			t.Errorf("shadow %s@%d: %v, want %v", c.name, c.version, err, c.want)
		}
	}
	if prev, err := s.SetShadow(ctx, "sh", 3); err != nil || prev != 2 {
		t.Fatalf("shadow 3: %d %v", prev, err)
	}
	if _, err := s.Activate(ctx, store.KindProtocol, "sh", 3); err != nil {
		t.Fatal(err)
	}
	if e, l, sn := shadow(); e != 0 || l != 0 || sn != 0 {
		t.Fatalf("activating the shadow left it in shadow: %d %d %d", e, l, sn)
	}
	if _, err := s.SetShadow(ctx, "sh", 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("clearing no shadow: %v", err)
	}
	// Rollback onto the version in shadow (history [1], active 3).
	if _, err := s.SetShadow(ctx, "sh", 1); err != nil {
		t.Fatal(err)
	}
	if to, _, err := s.Rollback(ctx, store.KindProtocol, "sh"); err != nil || to != 1 {
		t.Fatalf("rollback: %d %v", to, err)
	}
	if e, _, _ := shadow(); e != 0 {
		t.Fatalf("rollback onto the shadow left it in shadow: %d", e)
	}
	// A rollout's revert onto the version in shadow.
	if err := s.ApplyRollout(ctx, store.Rollout{ID: "sh-r", Protocols: []json.RawMessage{proto("r")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetShadow(ctx, "sh", 1); err != nil {
		t.Fatal(err)
	}
	if e, _, _ := shadow(); e != 1 {
		t.Fatalf("shadow after the rollout: %d", e)
	}
	if _, err := s.RevertLast(ctx); err != nil {
		t.Fatal(err)
	}
	if e, _, sn := shadow(); e != 0 || sn != 0 {
		t.Fatalf("revert onto the shadow left it in shadow: %d %d", e, sn)
	}
	if _, err := s.SetShadow(ctx, "sh", 2); err != nil {
		t.Fatal(err)
	}
	if prev, err := s.SetShadow(ctx, "sh", 0); err != nil || prev != 2 {
		t.Fatalf("clear: %d %v", prev, err)
	}
	if e, l, sn := shadow(); e != 0 || l != 0 || sn != 0 {
		t.Fatalf("cleared shadow still seen: %d %d %d", e, l, sn)
	}
}

// versions maps KIND/NAME to the active version of a snapshot.
func versions(s store.Snapshot) map[string]int {
	out := map[string]int{}
	for _, k := range store.Kinds() {
		for n, r := range s.Of(k) {
			out[store.Key(k, n)] = r.Version
		}
	}
	return out
}

// linksHook checks that every change runs the Links hook on what it would leave active, before
// anything is written: a protocol "a" whose active body holds "X" and a protocol "b" whose active
// body holds "Y" may not be active together.
func linksHook(t *testing.T, open Open) {
	ctx := context.Background()
	var mu sync.Mutex
	var calls [][]string
	conflict := errors.New("a holds X while b holds Y")
	s := open(t, Hooks{Links: func(active store.Snapshot, changed []string) error {
		mu.Lock()
		calls = append(calls, changed)
		mu.Unlock()
		if strings.Contains(string(active.Protocols["a"].Body), "X") && strings.Contains(string(active.Protocols["b"].Body), "Y") {
			return conflict
		}
		return nil
	}})
	lastCall := func() []string {
		mu.Lock()
		defer mu.Unlock()
		if len(calls) == 0 {
			return nil
		}
		return calls[len(calls)-1]
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrInvalid) || !errors.Is(err, conflict) {
			t.Fatalf("%s: %v, want ErrInvalid wrapping the hook's error", what, err)
		}
	}
	active := func(name string) int {
		t.Helper()
		e, err := s.Entry(ctx, store.KindProtocol, name)
		if err != nil {
			t.Fatal(err)
		}
		return e.Active
	}
	proto := func(id, marker string) []byte { return []byte(`{"id":"` + id + `","marker":"` + marker + `"}`) }

	// A new version is checked as if it were active, with its own key as the change.
	if _, err := s.AddVersion(ctx, store.KindProtocol, proto("a", "X"), "", ""); err != nil {
		t.Fatal(err)
	}
	if got := lastCall(); !reflect.DeepEqual(got, []string{"protocols/a"}) {
		t.Errorf("AddVersion: changed %v", got)
	}
	if _, err := s.AddVersion(ctx, store.KindProtocol, proto("b", "Y"), "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Activate(ctx, store.KindProtocol, "a", 1); err != nil {
		t.Fatal(err)
	}
	_, err := s.AddVersion(ctx, store.KindProtocol, proto("b", "Y again"), "", "")
	refused("AddVersion", err)
	if e, _ := s.Entry(ctx, store.KindProtocol, "b"); len(e.Versions) != 1 {
		t.Fatalf("a refused version was stored: %+v", e)
	}
	_, err = s.Activate(ctx, store.KindProtocol, "b", 1)
	refused("Activate", err)
	if got := lastCall(); !reflect.DeepEqual(got, []string{"protocols/b"}) {
		t.Errorf("Activate: changed %v", got)
	}
	if active("b") != 0 {
		t.Fatal("a refused activation moved the pointer")
	}

	// A rollout is checked as a whole: it may fix what a single change could not.
	err = s.ApplyRollout(ctx, store.Rollout{ID: "r-conflict", Protocols: []json.RawMessage{proto("b", "Y")}})
	refused("ApplyRollout", err)
	if rs, _ := s.Rollouts(ctx); len(rs) != 0 {
		t.Fatalf("a refused rollout was recorded: %v", rs)
	}
	if e, _ := s.Entry(ctx, store.KindProtocol, "b"); len(e.Versions) != 1 || e.Active != 0 {
		t.Fatalf("a refused rollout stored or activated a version: %+v", e)
	}
	if err := s.ApplyRollout(ctx, store.Rollout{ID: "r-fix", Protocols: []json.RawMessage{proto("a", "plain"), proto("b", "Y")}}); err != nil {
		t.Fatalf("a rollout that changes both: %v", err)
	}
	if got := lastCall(); !reflect.DeepEqual(got, []string{"protocols/a", "protocols/b"}) {
		t.Errorf("ApplyRollout: changed %v", got)
	}

	// Rollback of a to its X version, and reverting the rollout, would bring X and Y back together.
	_, _, err = s.Rollback(ctx, store.KindProtocol, "a")
	refused("Rollback", err)
	if active("a") == 1 {
		t.Fatal("a refused rollback moved the pointer")
	}
	if _, err := s.Activate(ctx, store.KindProtocol, "a", 1); err == nil {
		t.Fatal("activation of X next to Y accepted")
	}
	// b moved by hand since r-fix: reverting it puts a back at X and b at no version, which is
	// fine.
	if _, err := s.Activate(ctx, store.KindProtocol, "b", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevertLast(ctx); err != nil {
		t.Fatalf("RevertLast that leaves no conflict: %v", err)
	}
	if got := lastCall(); !reflect.DeepEqual(got, []string{"protocols/a", "protocols/b"}) {
		t.Errorf("RevertLast: changed %v", got)
	}
	// r2 sets a plain and b is then made Y by hand: reverting r2 would bring X back next to Y.
	if err := s.ApplyRollout(ctx, store.Rollout{ID: "r2", Protocols: []json.RawMessage{proto("a", "plain again")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Activate(ctx, store.KindProtocol, "b", 1); err != nil {
		t.Fatal(err)
	}
	_, err = s.RevertLast(ctx)
	refused("RevertLast", err)
	if rs, _ := s.Rollouts(ctx); len(rs) != 1 || rs[0].ID != "r2" {
		t.Fatalf("a refused revert forgot the rollout: %v", rs)
	}
}

// pinSet is an MCP pin set body of server with one tool whose description is desc.
func pinSet(server, desc string) []byte {
	b, _ := json.Marshal(map[string]any{"server": server, "tools": []map[string]string{{"name": "lookup", "description": desc}}})
	return b
}

// mcpPinSets checks the mcppins kind: a set is named by its "server", versioned like the other
// definitions (an approval is a new version, activated; a rollback re-activates the set before), in
// the snapshot by server, watched, and refused without a valid server label.
func mcpPinSets(t *testing.T, open Open) {
	ctx := context.Background()
	s := open(t, Hooks{})
	if es, err := s.List(ctx, store.KindMCPPins); err != nil || len(es) != 0 {
		t.Fatalf("a new store holds pin sets: %v %v", es, err)
	}
	var notified atomic.Int32
	cancel := s.Watch(func() { notified.Add(1) })
	defer cancel()
	for i, desc := range []string{"Looks a contact up.", "Looks a contact up, and more."} {
		v, err := s.AddVersion(ctx, store.KindMCPPins, pinSet("crm", desc), "first-list", "")
		if err != nil || v != i+1 {
			t.Fatalf("add version %d: %d %v", i+1, v, err)
		}
		if prev, err := s.Activate(ctx, store.KindMCPPins, "crm", v); err != nil || prev != i {
			t.Fatalf("activate %d: previous %d %v", v, prev, err)
		}
	}
	if notified.Load() < 4 {
		t.Errorf("watchers called %d times for 4 changes", notified.Load())
	}
	snap, err := s.Snapshot(ctx)
	if err != nil || snap.MCPPins["crm"].Version != 2 || snap.MCPPins["crm"].Kind != store.KindMCPPins {
		t.Fatalf("snapshot pins %+v %v", snap.MCPPins, err)
	}
	if len(snap.Protocols) != len(builtin.Protocols()) {
		t.Errorf("pin sets changed the protocols of the snapshot")
	}
	to, from, err := s.Rollback(ctx, store.KindMCPPins, "crm")
	if err != nil || to != 1 || from != 2 {
		t.Fatalf("rollback: %d %d %v", to, from, err)
	}
	rec, err := s.Active(ctx, store.KindMCPPins, "crm")
	if err != nil || string(rec.Body) != string(pinSet("crm", "Looks a contact up.")) {
		t.Fatalf("active after rollback: %s %v", rec.Body, err)
	}
	e, err := s.Entry(ctx, store.KindMCPPins, "crm")
	if err != nil || e.Active != 1 || e.RollbackTo != 0 || len(e.Versions) != 2 || e.Versions[0].Author != "first-list" {
		t.Fatalf("entry %+v %v", e, err)
	}
	for _, body := range []string{`{"name":"crm","tools":[]}`, `{"server":"a b","tools":[]}`, `{"server":7}`} {
		if _, err := s.AddVersion(ctx, store.KindMCPPins, []byte(body), "", ""); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("%s: %v", body, err)
		}
	}
	if store.NameKey(store.KindMCPPins) != "server" {
		t.Errorf("name key %q", store.NameKey(store.KindMCPPins))
	}
}

// activateIf checks ActivateIf: it activates only over the expected version (0: none), changes
// nothing and notifies nobody otherwise, and writers that each read the active version, store the
// next one and activate it over what they read lose no update.
func activateIf(t *testing.T, open Open) {
	ctx := context.Background()
	s := open(t, Hooks{})
	v1, err := s.AddVersion(ctx, store.KindTemplate, tpl("cas", "0"), "", "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ActivateIf(ctx, store.KindTemplate, "cas", v1, 3); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("expected 3 over none: %v", err)
	}
	var notified atomic.Int32
	cancel := s.Watch(func() { notified.Add(1) })
	if err := s.ActivateIf(ctx, store.KindTemplate, "cas", v1, 0); err != nil {
		t.Fatalf("expected none: %v", err)
	}
	v2, _ := s.AddVersion(ctx, store.KindTemplate, tpl("cas", "0"), "", "")
	notified.Store(0)
	if err := s.ActivateIf(ctx, store.KindTemplate, "cas", v2, 0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("expected none over %d: %v", v1, err)
	}
	if notified.Load() != 0 {
		t.Error("a refused ActivateIf notified the watchers")
	}
	cancel()
	if rec, _ := s.Active(ctx, store.KindTemplate, "cas"); rec.Version != v1 {
		t.Fatalf("a refused ActivateIf moved the pointer to %d", rec.Version)
	}
	if err := s.ActivateIf(ctx, store.KindTemplate, "nope", 1, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown name: %v", err)
	}

	const writers, each = 4, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			for done := 0; done < each; {
				rec, err := s.Active(ctx, store.KindTemplate, "cas")
				if err != nil {
					errs <- err
					return
				}
				var n int
				_, _ = fmt.Sscan(templateText(rec.Body), &n)
				v, err := s.AddVersion(ctx, store.KindTemplate, tpl("cas", fmt.Sprint(n+1)), "", "")
				if err != nil {
					errs <- err
					return
				}
				switch err := s.ActivateIf(ctx, store.KindTemplate, "cas", v, rec.Version); {
				case err == nil:
					done++
				case !errors.Is(err, store.ErrConflict):
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rec, err := s.Active(ctx, store.KindTemplate, "cas")
	if err != nil || templateText(rec.Body) != fmt.Sprint(writers*each) {
		t.Fatalf("after %d updates the active text is %q (%v)", writers*each, templateText(rec.Body), err)
	}
}

// templateText is the "text" of a template body.
func templateText(body []byte) string {
	var v struct{ Text string }
	_ = json.Unmarshal(body, &v)
	return v.Text
}
