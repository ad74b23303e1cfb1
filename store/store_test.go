package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/builtin"
)

var ctx = context.Background()

func openAt(t testing.TB, path string, opts store.Options) *store.Bolt {
	t.Helper()
	s, err := store.Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func open(t testing.TB) (*store.Bolt, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "promptgate.db")
	return openAt(t, path, store.Options{}), path
}

func tmpl(name, text string) []byte {
	b, _ := json.Marshal(map[string]string{"name": name, "text": text})
	return b
}

func proto(id, desc string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"description":%q,"promptTemplate":{"base":"base_tool_call_v2"}}`, id, desc)
}

func mustAdd(t *testing.T, s store.Store, kind store.Kind, body []byte) int {
	t.Helper()
	v, err := s.AddVersion(ctx, kind, body, "tester", "test")
	if err != nil {
		t.Fatalf("AddVersion: %v", err)
	}
	return v
}

func activeVersion(t *testing.T, s store.Store, kind store.Kind, name string) int {
	t.Helper()
	r, err := s.Active(ctx, kind, name)
	if errors.Is(err, store.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("Active(%s/%s): %v", kind, name, err)
	}
	return r.Version
}

// actives returns "kind/name" -> active version for every active record.
func actives(t *testing.T, s store.Store) map[string]int {
	t.Helper()
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, k := range store.Kinds() {
		for name, r := range snap.Of(k) {
			out[store.Key(k, name)] = r.Version
		}
	}
	return out
}

func TestOpenSeedsNewFileOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "promptgate.db")
	s := openAt(t, path, store.Options{})
	for _, c := range []struct {
		kind store.Kind
		defs []builtin.Definition
	}{{store.KindTemplate, builtin.Templates()}, {store.KindProtocol, builtin.Protocols()}} {
		entries, err := s.List(ctx, c.kind)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != len(c.defs) {
			t.Fatalf("%s: %d entries, want %d", c.kind, len(entries), len(c.defs))
		}
		for i, d := range c.defs {
			e := entries[i]
			if e.Name != d.Name || e.Active != 1 || len(e.Versions) != 1 {
				t.Errorf("%s: entry %+v, want %s active 1 with one version", c.kind, e, d.Name)
			}
			if v := e.Versions[0]; v.Author != "builtin" || v.Note != "seeded from the binary" || v.CreatedAt.IsZero() {
				t.Errorf("%s/%s: version info %+v", c.kind, d.Name, v)
			}
			r, err := s.Active(ctx, c.kind, d.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.Body, d.Body) || r.Version != 1 || r.Kind != c.kind || r.Name != d.Name {
				t.Errorf("%s/%s: record %+v differs from the built-in", c.kind, d.Name, r)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopen: nothing seeded again. Then remove a built-in by hand: still not reseeded.
	s = openAt(t, path, store.Options{})
	e, err := s.Entry(ctx, store.KindTemplate, "base_tool_call_v2")
	if err != nil || len(e.Versions) != 1 {
		t.Fatalf("after reopen: %+v, %v", e, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("templates")).DeleteBucket([]byte("base_legacy_v1"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s = openAt(t, path, store.Options{})
	if _, err := s.Active(ctx, store.KindTemplate, "base_legacy_v1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("removed built-in was reseeded or other error: %v", err)
	}
	fb, ok := store.Fallback(store.KindTemplate, "base_legacy_v1")
	if !ok || fb.Version != 0 || fb.Author != "builtin" || !bytes.Contains(fb.Body, []byte("OUTPUT FORMAT:")) {
		t.Fatalf("Fallback = %+v, %v", fb, ok)
	}
	if _, ok := store.Fallback(store.KindProtocol, "nope"); ok {
		t.Fatal("Fallback found an unknown protocol")
	}
}

func TestSeedingRunsValidateHook(t *testing.T) {
	var seen []string
	var mu sync.Mutex
	path := filepath.Join(t.TempDir(), "promptgate.db")
	openAt(t, path, store.Options{Validate: func(k store.Kind, name string, body []byte) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, store.Key(k, name))
		return nil
	}})
	if len(seen) != len(builtin.Templates())+len(builtin.Protocols()) {
		t.Fatalf("hook saw %v", seen)
	}

	refuse := filepath.Join(t.TempDir(), "refused.db")
	_, err := store.Open(refuse, store.Options{Validate: func(k store.Kind, name string, _ []byte) error {
		if name == "tech" {
			return errors.New("no tech today")
		}
		return nil
	}})
	if err == nil || !strings.Contains(err.Error(), "no tech today") || !strings.Contains(err.Error(), refuse) {
		t.Fatalf("Open with a refusing hook: %v", err)
	}
}

func TestVersionsAreImmutableAndIncreasing(t *testing.T) {
	s, _ := open(t)
	var bodies [][]byte
	for i := 1; i <= 3; i++ {
		body := tmpl("greeting", fmt.Sprintf("hello %d", i))
		body = append(body, "  "...) // stored byte for byte, white space included
		bodies = append(bodies, slices.Clone(body))
		if v := mustAdd(t, s, store.KindTemplate, body); v != i {
			t.Fatalf("version %d, want %d", v, i)
		}
		body[2] = 'X' // the caller reusing its buffer must not change what was stored
	}
	for i, want := range bodies {
		r, err := s.Get(ctx, store.KindTemplate, "greeting", i+1)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Body, want) {
			t.Fatalf("v%d body %q, want %q", i+1, r.Body, want)
		}
		r.Body[0] = 'Z' // mutating a returned record must not reach the store
		again, _ := s.Get(ctx, store.KindTemplate, "greeting", i+1)
		if !bytes.Equal(again.Body, want) {
			t.Fatal("a returned body shares memory with the store")
		}
		if r.Author != "tester" || r.Note != "test" || r.CreatedAt.IsZero() {
			t.Fatalf("record %+v", r)
		}
	}
	// AddVersion does not activate.
	if _, err := s.Active(ctx, store.KindTemplate, "greeting"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Active after AddVersion: %v", err)
	}
	e, err := s.Entry(ctx, store.KindTemplate, "greeting")
	if err != nil {
		t.Fatal(err)
	}
	if e.Active != 0 || len(e.Versions) != 3 || e.Versions[0].Version != 1 || e.Versions[2].Version != 3 {
		t.Fatalf("entry %+v", e)
	}
	if _, err := s.Get(ctx, store.KindTemplate, "greeting", 4); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get v4: %v", err)
	}
	if _, err := s.Get(ctx, store.KindTemplate, "nope", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get unknown: %v", err)
	}
	if _, err := s.Entry(ctx, store.KindProtocol, "greeting"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("kinds are separate: %v", err)
	}
	// Versions keep increasing after activation and reopen.
	if _, err := s.Activate(ctx, store.KindTemplate, "greeting", 2); err != nil {
		t.Fatal(err)
	}
	if v := mustAdd(t, s, store.KindTemplate, tmpl("greeting", "hello 4")); v != 4 {
		t.Fatalf("version %d, want 4", v)
	}
	list, err := s.List(ctx, store.KindTemplate)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(list, func(a, b store.Entry) int { return strings.Compare(a.Name, b.Name) }) {
		t.Fatalf("List not sorted: %v", list)
	}
}

func TestActivateAndRollback(t *testing.T) {
	s, _ := open(t)
	for i := 1; i <= 3; i++ {
		mustAdd(t, s, store.KindProtocol, proto("p1", fmt.Sprint("v", i)))
	}
	var changes atomic.Int32
	defer s.Watch(func() { changes.Add(1) })()

	if _, err := s.Activate(ctx, store.KindProtocol, "p1", 1); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Rollback(ctx, store.KindProtocol, "p1"); !errors.Is(err, store.ErrNoPreviousVersion) {
		t.Fatalf("rollback with no previous version: %v", err)
	}
	if _, err := s.Activate(ctx, store.KindProtocol, "p1", 2); err != nil {
		t.Fatal(err)
	}
	before := changes.Load()
	if _, err := s.Activate(ctx, store.KindProtocol, "p1", 2); err != nil { // no-op, no history entry
		t.Fatal(err)
	}
	if changes.Load() != before {
		t.Fatal("a no-op activation notified watchers")
	}
	if _, err := s.Activate(ctx, store.KindProtocol, "p1", 3); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{2, 1} {
		got, _, err := s.Rollback(ctx, store.KindProtocol, "p1")
		if err != nil || got != want {
			t.Fatalf("Rollback = %d, %v; want %d", got, err, want)
		}
		if v := activeVersion(t, s, store.KindProtocol, "p1"); v != want {
			t.Fatalf("active %d, want %d", v, want)
		}
	}
	_, _, err := s.Rollback(ctx, store.KindProtocol, "p1")
	if !errors.Is(err, store.ErrNoPreviousVersion) || !strings.HasPrefix(err.Error(), "store: ") || !strings.Contains(err.Error(), "protocols/p1") {
		t.Fatalf("rollback past the first activation: %v", err)
	}
	if _, err := s.Activate(ctx, store.KindProtocol, "p1", 9); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("activate a missing version: %v", err)
	}
	if _, err := s.Activate(ctx, store.KindProtocol, "nope", 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("activate a missing name: %v", err)
	}
	if _, _, err := s.Rollback(ctx, store.KindProtocol, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rollback a missing name: %v", err)
	}
	if _, err := s.Activate(ctx, store.Kind("nope"), "p1", 1); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("unknown kind: %v", err)
	}
	if changes.Load() != 5 { // activate 1, 2, 3, rollback, rollback
		t.Fatalf("%d notifications, want 5", changes.Load())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Activate(cctx, store.KindProtocol, "p1", 2); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
}

func TestStructuralChecks(t *testing.T) {
	long := strings.Repeat("a", 65)
	cases := []struct {
		name string
		kind store.Kind
		body string
		want string
	}{
		{"not json", store.KindTemplate, `{"name":"a",`, "not valid JSON"},
		{"array", store.KindTemplate, `[{"name":"a","text":""}]`, "must be a JSON object, got an array"},
		{"string", store.KindProtocol, `"tech"`, "must be a JSON object, got a string"},
		{"empty", store.KindProtocol, ``, "not valid JSON"},
		{"two values", store.KindProtocol, `{"id":"a"}{"id":"b"}`, "not valid JSON"},
		{"bad utf-8", store.KindTemplate, "{\"name\":\"a\",\"text\":\"\xff\"}", "UTF-8"},
		{"missing name", store.KindTemplate, `{"text":"x"}`, `missing "name"`},
		{"name not string", store.KindTemplate, `{"name":7,"text":"x"}`, `"name" must be a string, got a number`},
		{"empty name", store.KindTemplate, `{"name":"","text":"x"}`, `want 1 to 64 characters`},
		{"bad name", store.KindTemplate, `{"name":"a/b","text":"x"}`, `"name" is "a/b"`},
		{"long name", store.KindTemplate, `{"name":"` + long + `","text":"x"}`, `want 1 to 64`},
		{"missing text", store.KindTemplate, `{"name":"a"}`, `"text" must be a string, got nothing`},
		{"text not string", store.KindTemplate, `{"name":"a","text":["x"]}`, `"text" must be a string, got an array`},
		{"protocol with name only", store.KindProtocol, `{"name":"tech"}`, `missing "id"`},
		{"duplicate key", store.KindProtocol, `{"id":"a","id":"b"}`, `duplicate key "id"`},
		{"unknown kind", store.Kind("prompts"), `{"id":"a"}`, `unknown kind "prompts"`},
	}
	s, _ := open(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := store.CheckStructure(c.kind, []byte(c.body))
			if err == nil || !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "store: ") {
				t.Fatalf("CheckStructure: %v; want an ErrInvalid containing %q", err, c.want)
			}
			if _, err := s.AddVersion(ctx, c.kind, []byte(c.body), "", ""); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("AddVersion: %v", err)
			}
		})
	}
	if list, _ := s.List(ctx, store.KindTemplate); len(list) != len(builtin.Templates()) {
		t.Fatalf("a refused body was stored: %v", list)
	}
	for _, ok := range []struct {
		kind store.Kind
		body string
	}{
		{store.KindTemplate, `{"name":"A-z_0.9","text":""}`},
		{store.KindProtocol, `{"id":"` + long[:64] + `","anything":{"goes":[1,2]}}`},
	} {
		if _, err := store.CheckStructure(ok.kind, []byte(ok.body)); err != nil {
			t.Errorf("CheckStructure(%s): %v", ok.body, err)
		}
	}
}

func TestValidateHookRefusalStoresNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "promptgate.db")
	var calls []string
	s := openAt(t, path, store.Options{Validate: func(k store.Kind, name string, body []byte) error {
		calls = append(calls, store.Key(k, name))
		if bytes.Contains(body, []byte("forbidden")) {
			return fmt.Errorf("promptTemplate.base %q does not exist", "forbidden")
		}
		return nil
	}})
	calls = nil
	_, err := s.AddVersion(ctx, store.KindProtocol, proto("p2", "forbidden"), "", "")
	if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), `promptTemplate.base "forbidden" does not exist`) || !strings.Contains(err.Error(), "protocols/p2") {
		t.Fatalf("AddVersion: %v", err)
	}
	if !slices.Equal(calls, []string{"protocols/p2"}) {
		t.Fatalf("hook calls %v", calls)
	}
	if _, err := s.Entry(ctx, store.KindProtocol, "p2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("refused body was stored: %v", err)
	}
	// A structurally broken body never reaches the hook.
	calls = nil
	if _, err := s.AddVersion(ctx, store.KindProtocol, []byte(`{}`), "", ""); err == nil || len(calls) != 0 {
		t.Fatalf("err %v, hook calls %v", err, calls)
	}
	if v := mustAdd(t, s, store.KindProtocol, proto("p2", "fine")); v != 1 {
		t.Fatalf("version %d after a refusal, want 1", v)
	}
}

func rollout(id string, templates, protocols [][]byte) store.Rollout {
	r := store.Rollout{ID: id}
	for _, b := range templates {
		r.Templates = append(r.Templates, b)
	}
	for _, b := range protocols {
		r.Protocols = append(r.Protocols, b)
	}
	return r
}

func TestRolloutUpAndDownRestoresExactly(t *testing.T) {
	s, _ := open(t)
	// tech gets a hand-made history first, so we can check that revert restores it too.
	v2 := mustAdd(t, s, store.KindProtocol, proto("tech", "hand v2"))
	if _, err := s.Activate(ctx, store.KindProtocol, "tech", v2); err != nil {
		t.Fatal(err)
	}
	before := actives(t, s)

	r1 := rollout("0001-first",
		[][]byte{tmpl("base_tool_call_v2", "=== SYSTEM CORE ===\nnew core"), tmpl("brand_new", "hi")},
		[][]byte{proto("tech", "from r1"), proto("workflow_x", "new")})
	if err := s.ApplyRollout(ctx, r1); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"templates/base_tool_call_v2": 2, "templates/brand_new": 1, "protocols/tech": 3, "protocols/workflow_x": 1}
	for key, v := range want {
		kind, name, _ := strings.Cut(key, "/")
		r, err := s.Active(ctx, store.Kind(kind), name)
		if err != nil || r.Version != v || r.Author != store.RolloutAuthor || r.Note != r1.ID {
			t.Fatalf("%s: %+v, %v; want version %d by migrate", key, r, err, v)
		}
	}
	applied, err := s.Rollouts(ctx)
	if err != nil || len(applied) != 1 {
		t.Fatalf("Rollouts = %v, %v", applied, err)
	}
	wantPrev := map[string]int{"templates/base_tool_call_v2": 1, "templates/brand_new": 0, "protocols/tech": 2, "protocols/workflow_x": 0}
	if a := applied[0]; a.ID != r1.ID || a.AppliedAt.IsZero() || !maps.Equal(a.Previous, wantPrev) || !maps.Equal(a.Activated, want) {
		t.Fatalf("applied %+v", a)
	}

	if err := s.ApplyRollout(ctx, r1); !errors.Is(err, store.ErrAlreadyApplied) || !strings.Contains(err.Error(), r1.ID) {
		t.Fatalf("apply twice: %v", err)
	}
	r2 := rollout("0002-second", nil, [][]byte{proto("tech", "from r2")})
	if err := s.ApplyRollout(ctx, r2); err != nil {
		t.Fatal(err)
	}
	if v := activeVersion(t, s, store.KindProtocol, "tech"); v != 4 {
		t.Fatalf("tech active %d, want 4", v)
	}

	// Down twice: r2, then r1.
	got, err := s.RevertLast(ctx)
	if err != nil || got.ID != r2.ID {
		t.Fatalf("RevertLast = %+v, %v", got, err)
	}
	if v := activeVersion(t, s, store.KindProtocol, "tech"); v != 3 {
		t.Fatalf("after reverting r2 tech active %d, want 3", v)
	}
	got, err = s.RevertLast(ctx)
	if err != nil || got.ID != r1.ID || !maps.Equal(got.Previous, wantPrev) {
		t.Fatalf("RevertLast = %+v, %v", got, err)
	}
	if after := actives(t, s); !maps.Equal(after, before) {
		t.Fatalf("after down:\n%v\nwant\n%v", after, before)
	}
	for _, key := range []string{"templates/brand_new", "protocols/workflow_x"} {
		kind, name, _ := strings.Cut(key, "/")
		if _, err := s.Active(ctx, store.Kind(kind), name); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s still active: %v", key, err)
		}
		e, err := s.Entry(ctx, store.Kind(kind), name)
		if err != nil || e.Active != 0 || len(e.Versions) != 1 {
			t.Fatalf("%s: versions must stay after revert: %+v, %v", key, e, err)
		}
	}
	// The activation history is back as it was: one rollback to the seeded version, then none.
	if v, _, err := s.Rollback(ctx, store.KindProtocol, "tech"); err != nil || v != 1 {
		t.Fatalf("Rollback after down = %d, %v; want 1", v, err)
	}
	if _, _, err := s.Rollback(ctx, store.KindProtocol, "tech"); !errors.Is(err, store.ErrNoPreviousVersion) {
		t.Fatalf("history not restored: %v", err)
	}
	if _, err := s.RevertLast(ctx); !errors.Is(err, store.ErrNothingToRevert) {
		t.Fatalf("third down: %v", err)
	}
	if applied, _ := s.Rollouts(ctx); len(applied) != 0 {
		t.Fatalf("Rollouts after down = %v", applied)
	}
	// Reverted rollouts can be applied again; they store new versions.
	if err := s.ApplyRollout(ctx, r1); err != nil {
		t.Fatal(err)
	}
	if v := activeVersion(t, s, store.KindTemplate, "brand_new"); v != 2 {
		t.Fatalf("re-applied brand_new active %d, want 2", v)
	}
}

func TestRevertAfterManualActivation(t *testing.T) {
	s, _ := open(t)
	if err := s.ApplyRollout(ctx, rollout("r", nil, [][]byte{proto("tech", "r")})); err != nil {
		t.Fatal(err)
	}
	v3 := mustAdd(t, s, store.KindProtocol, proto("tech", "hand"))
	if _, err := s.Activate(ctx, store.KindProtocol, "tech", v3); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RevertLast(ctx); err != nil {
		t.Fatal(err)
	}
	if v := activeVersion(t, s, store.KindProtocol, "tech"); v != 1 {
		t.Fatalf("revert must restore exactly the previous version, got %d", v)
	}
	if v, _, err := s.Rollback(ctx, store.KindProtocol, "tech"); err != nil || v != v3 {
		t.Fatalf("rollback after revert = %d, %v; want the hand-activated %d", v, err, v3)
	}
}

func TestRolloutIsAtomic(t *testing.T) {
	path := filepath.Join(t.TempDir(), "promptgate.db")
	s := openAt(t, path, store.Options{Validate: func(k store.Kind, name string, body []byte) error {
		if name == "refused" {
			return errors.New("refused by the hook")
		}
		return nil
	}})
	before := actives(t, s)
	good := [][]byte{tmpl("t_new", "x"), tmpl("base_legacy_v1", "y")}
	cases := []struct {
		name string
		r    store.Rollout
		want string
	}{
		{"structurally invalid protocol", rollout("bad1", good, [][]byte{proto("tech", "ok"), []byte(`{"description":"no id"}`)}), `protocols[1]: invalid: missing "id"`},
		{"hook refuses a protocol", rollout("bad2", good, [][]byte{proto("refused", "x")}), "protocols[0] (refused): invalid: refused by the hook"},
		{"same name twice", rollout("bad3", good, [][]byte{proto("tech", "a"), proto("tech", "b")}), `protocols[0] and protocols[1] both define "tech"`},
		{"missing id", rollout("", good, nil), "missing rollout id"},
		{"bad id", rollout("a b", good, nil), `rollout id "a b"`},
		{"empty", rollout("empty", nil, nil), "no templates and no protocols"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.ApplyRollout(ctx, c.r)
			if !errors.Is(err, store.ErrInvalid) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "store: rollout ") {
				t.Fatalf("ApplyRollout: %v; want %q", err, c.want)
			}
		})
	}
	if after := actives(t, s); !maps.Equal(after, before) {
		t.Fatalf("a failed rollout changed the store: %v", after)
	}
	if _, err := s.Entry(ctx, store.KindTemplate, "t_new"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a failed rollout stored a version: %v", err)
	}
	if e, _ := s.Entry(ctx, store.KindTemplate, "base_legacy_v1"); len(e.Versions) != 1 {
		t.Fatalf("a failed rollout stored a version: %+v", e)
	}
	if applied, _ := s.Rollouts(ctx); len(applied) != 0 {
		t.Fatalf("a failed rollout was recorded: %v", applied)
	}
}

func TestSecondOpenTimesOutNamingTheFile(t *testing.T) {
	_, path := open(t)
	for _, ro := range []bool{false, true} {
		start := time.Now()
		_, err := store.Open(path, store.Options{LockTimeout: 100 * time.Millisecond, ReadOnly: ro})
		if !errors.Is(err, store.ErrLocked) {
			t.Fatalf("read-only=%v: %v; want ErrLocked", ro, err)
		}
		if msg := err.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, "another process") || !strings.Contains(msg, "promptgate serve") || !strings.HasPrefix(msg, "store: ") {
			t.Fatalf("error does not name the file and the likely holder: %v", err)
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("LockTimeout ignored")
		}
	}
}

func TestReadOnly(t *testing.T) {
	s, path := open(t)
	mustAdd(t, s, store.KindTemplate, tmpl("x", "y"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro := openAt(t, path, store.Options{ReadOnly: true})
	if v := activeVersion(t, ro, store.KindProtocol, "neutral"); v != 1 {
		t.Fatalf("read-only Active = %d", v)
	}
	if _, err := ro.AddVersion(ctx, store.KindTemplate, tmpl("x", "z"), "", ""); err == nil || !strings.HasPrefix(err.Error(), "store: ") {
		t.Fatalf("write on a read-only store: %v", err)
	}
	// Two readers may share the file.
	openAt(t, path, store.Options{ReadOnly: true})

	missing := filepath.Join(t.TempDir(), "missing.db")
	if _, err := store.Open(missing, store.Options{ReadOnly: true}); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("read-only open of a missing file: %v", err)
	}
}

func TestWatch(t *testing.T) {
	s, _ := open(t)
	var n atomic.Int32
	var seen atomic.Int32
	cancel := s.Watch(func() {
		n.Add(1)
		// A watcher may read the store: no lock is held while it runs.
		snap, err := s.Snapshot(ctx)
		if err == nil {
			if r, ok := snap.Templates["w"]; ok {
				seen.Store(int32(r.Version))
			}
		}
	})
	v := mustAdd(t, s, store.KindTemplate, tmpl("w", "1"))
	if _, err := s.Activate(ctx, store.KindTemplate, "w", v); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 2 || seen.Load() != 1 {
		t.Fatalf("after add+activate: %d calls, saw version %d", n.Load(), seen.Load())
	}
	if err := s.ApplyRollout(ctx, rollout("w", [][]byte{tmpl("w", "2")}, nil)); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 3 || seen.Load() != 2 {
		t.Fatalf("after rollout: %d calls, saw version %d", n.Load(), seen.Load())
	}
	if _, err := s.RevertLast(ctx); err != nil {
		t.Fatal(err)
	}
	if n.Load() != 4 || seen.Load() != 1 {
		t.Fatalf("after revert: %d calls, saw version %d", n.Load(), seen.Load())
	}
	_ = s.ApplyRollout(ctx, rollout("", nil, nil)) // a failure changes nothing and notifies nobody
	cancel()
	cancel() // idempotent
	mustAdd(t, s, store.KindTemplate, tmpl("w", "3"))
	if n.Load() != 4 {
		t.Fatalf("%d calls; want 4 (no call after a failure or after cancel)", n.Load())
	}
	s.Watch(nil)() // harmless
}

// TestConcurrentActivateAndSnapshot runs writers and readers together; run it with -race.
func TestConcurrentActivateAndSnapshot(t *testing.T) {
	s, _ := open(t)
	const versions = 5
	for i := 1; i <= versions; i++ {
		mustAdd(t, s, store.KindTemplate, tmpl("hot", fmt.Sprintf("text of version %d", i)))
		mustAdd(t, s, store.KindProtocol, proto("hot", fmt.Sprintf("version %d", i)))
	}
	for _, k := range []store.Kind{store.KindTemplate, store.KindProtocol} {
		if _, err := s.Activate(ctx, k, "hot", 1); err != nil {
			t.Fatal(err)
		}
	}
	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		watched atomic.Int64
		errs    = make(chan error, 64)
	)
	defer s.Watch(func() { watched.Add(1) })()
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				v := (w+i)%versions + 1
				if _, err := s.Activate(ctx, store.KindTemplate, "hot", v); err != nil {
					errs <- err
					return
				}
				if _, err := s.Activate(ctx, store.KindProtocol, "hot", v); err != nil {
					errs <- err
					return
				}
				if i%10 == 0 {
					if _, _, err := s.Rollback(ctx, store.KindTemplate, "hot"); err != nil && !errors.Is(err, store.ErrNoPreviousVersion) {
						errs <- err
						return
					}
				}
			}
		})
	}
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for !stop.Load() {
				snap, err := s.Snapshot(ctx)
				if err != nil {
					errs <- err
					return
				}
				r, ok := snap.Templates["hot"]
				if !ok {
					errs <- errors.New("snapshot lacks the active template")
					return
				}
				if want := fmt.Sprintf("text of version %d", r.Version); !bytes.Contains(r.Body, []byte(want)) {
					errs <- fmt.Errorf("snapshot record v%d holds %s", r.Version, r.Body)
					return
				}
				if len(snap.Protocols) != len(builtin.Protocols())+1 {
					errs <- fmt.Errorf("snapshot has %d protocols", len(snap.Protocols))
					return
				}
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if watched.Load() == 0 {
		t.Error("watcher never called")
	}
}

func TestRecordMarshalJSON(t *testing.T) {
	r := store.Record{Kind: store.KindTemplate, Name: "a", Version: 2, Note: "n", Body: []byte(`{"name":"a","text":"x"}`)}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"body":{"name":"a","text":"x"}`)) || !bytes.Contains(b, []byte(`"kind":"templates"`)) || bytes.Contains(b, []byte(`"author"`)) {
		t.Fatalf("%s", b)
	}
}

func TestContextCancelled(t *testing.T) {
	s, _ := open(t)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Snapshot(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := s.ApplyRollout(cctx, rollout("x", [][]byte{tmpl("x", "y")}, nil)); !errors.Is(err, context.Canceled) {
		t.Fatalf("ApplyRollout: %v", err)
	}
	if _, err := s.AddVersion(cctx, store.KindTemplate, tmpl("x", "y"), "", ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("AddVersion: %v", err)
	}
}

func BenchmarkSnapshot(b *testing.B) {
	s, _ := open(b)
	for i := range 20 {
		body := tmpl(fmt.Sprintf("t%02d", i), strings.Repeat("template text ", 200))
		v, err := s.AddVersion(ctx, store.KindTemplate, body, "", "")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Activate(ctx, store.KindTemplate, fmt.Sprintf("t%02d", i), v); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Snapshot(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func TestToolOverrides(t *testing.T) {
	s, path := open(t)
	ctx := context.Background()
	fired := make(chan struct{}, 10)
	cancel := s.Watch(func() { fired <- struct{}{} })
	defer cancel()
	if err := s.SetToolEnabled(ctx, "web_fetch", false, "ops"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fired:
	default:
		t.Error("SetToolEnabled did not notify watchers")
	}
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := snap.Tools["web_fetch"]; !ok || o.Enabled || o.Author != "ops" || o.UpdatedAt.IsZero() {
		t.Fatalf("override %+v %v", o, ok)
	}
	if err := s.SetToolEnabled(ctx, "", true, "ops"); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("empty name: %v", err)
	}
	// Persisted across reopen.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := openAt(t, path, store.Options{})
	snap, _ = s2.Snapshot(ctx)
	if o := snap.Tools["web_fetch"]; o.Enabled || len(snap.Tools) != 1 {
		t.Fatalf("after reopen: %+v", snap.Tools)
	}
	if err := s2.ClearToolEnabled(ctx, "web_fetch"); err != nil {
		t.Fatal(err)
	}
	if err := s2.ClearToolEnabled(ctx, "web_fetch"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("clearing twice: %v", err)
	}
	snap, _ = s2.Snapshot(ctx)
	if len(snap.Tools) != 0 {
		t.Errorf("after clear: %+v", snap.Tools)
	}
}

func TestWatchersOrderAndCancel(t *testing.T) {
	var w store.Watchers
	var got []int
	c1 := w.Add(func() { got = append(got, 1) })
	w.Add(func() { got = append(got, 2) })
	w.Add(nil)()
	w.Notify()
	c1()
	c1()
	w.Notify()
	w.Clear()
	w.Notify()
	if fmt.Sprint(got) != "[1 2 2]" {
		t.Fatalf("calls %v, want [1 2 2]", got)
	}
}
