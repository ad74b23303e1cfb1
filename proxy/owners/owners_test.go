package owners

import (
	"fmt"
	"net/http"
	"runtime"
	"testing"
)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// TestOwnsOnlyTheCreator: an id is its binder's; another credential, and an id never bound, are
// nobody's.
func TestOwnsOnlyTheCreator(t *testing.T) {
	t.Parallel()
	r := New(0)
	alice, bob := r.Credential(header("Authorization", "Bearer a")), r.Credential(header("Authorization", "Bearer b"))
	r.Bind("resp_1", alice)
	if !r.Owns("resp_1", alice) || r.Owns("resp_1", bob) || r.Owns("resp_2", alice) || r.Owns("", alice) {
		t.Fatal("wrong owner")
	}
	r.Bind("resp_1", bob) // an answer cannot hand a client another's id
	if !r.Owns("resp_1", alice) || r.Owns("resp_1", bob) {
		t.Fatal("the first binding did not stay")
	}
	r.Bind("", alice)
	if r.Len() != 1 {
		t.Fatalf("%d ids", r.Len())
	}
}

// TestCredentialReadsEveryHeader: a credential is the client's Authorization, X-Api-Key and
// Api-Key, every value in order; a header moved to another name, a value split, or any change is
// another credential, and two Records never agree (their keys are their own).
func TestCredentialReadsEveryHeader(t *testing.T) {
	t.Parallel()
	r := New(0)
	hs := []http.Header{
		header(),
		header("Authorization", "Bearer k"),
		header("Authorization", "Bearer K"),
		header("X-Api-Key", "Bearer k"),
		header("Api-Key", "Bearer k"),
		header("Authorization", "Bearer k", "X-Api-Key", "x"),
		header("Authorization", "Bearer k", "Authorization", "x"),
		header("Authorization", "x", "Authorization", "Bearer k"),
		header("Authorization", "Bearer kx"),
		header("Authorization", "Bearer k\x00"),
	}
	seen := map[Credential]int{}
	for i, h := range hs {
		c := r.Credential(h)
		if j, ok := seen[c]; ok {
			t.Errorf("headers %d and %d give one credential: %v, %v", j, i, hs[j], h)
		}
		seen[c] = i
		if r.Credential(h.Clone()) != c {
			t.Errorf("headers %d: not the same credential twice", i)
		}
	}
	if New(0).Credential(hs[1]) == r.Credential(hs[1]) {
		t.Error("two records give one credential the same digest")
	}
	if r.Credential(header("authorization", "Bearer k")) != r.Credential(hs[1]) {
		t.Error("header names are not canonical")
	}
}

// TestRecordBounded: past max ids, the oldest bound are forgotten first (and are then nobody's),
// the newest kept.
func TestRecordBounded(t *testing.T) {
	t.Parallel()
	const max = 100
	r := New(max)
	c := r.Credential(header("Authorization", "Bearer a"))
	for i := range 3 * max {
		r.Bind(fmt.Sprint("resp_", i), c)
		if r.Len() > max {
			t.Fatalf("%d ids after %d", r.Len(), i+1)
		}
	}
	for i := range 3 * max {
		if got, want := r.Owns(fmt.Sprint("resp_", i), c), i >= 2*max; got != want {
			t.Fatalf("id %d: owned %v, want %v", i, got, want)
		}
	}
}

// TestRecordMemoryPerID: a full record holds a fixed number of bytes per id, whatever the length of
// the ids, and binding more does not grow it. Measured as heap bytes (runtime.MemStats); not
// parallel.
func TestRecordMemoryPerID(t *testing.T) {
	const max = 100_000
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	r := New(max)
	c := r.Credential(header("Authorization", "Bearer a"))
	long := string(make([]byte, 1000))
	for i := range max {
		r.Bind(fmt.Sprint(long, i), c)
	}
	full := heap()
	for i := range 2 * max {
		r.Bind(fmt.Sprint("resp_", i), c)
	}
	after := heap()
	perID := float64(full-before) / max
	t.Logf("%.0f bytes per id when full; %d bytes more after %d more ids", perID, int64(after)-int64(full), 2*max)
	if perID > 128 {
		t.Errorf("%.0f bytes per id, want at most 128", perID)
	}
	if after > full+full/10 {
		t.Errorf("the record grew from %d to %d bytes past its bound", full-before, after-before)
	}
	runtime.KeepAlive(r)
}
