package vet

import (
	"strings"
	"sync"
	"testing"
)

// TestSchemaCacheSameDecisions vets the same calls with a shared cache and without one: every
// reason must be the same, and the cache must hold each distinct schema once (a bad schema too).
func TestSchemaCacheSameDecisions(t *testing.T) {
	schemas := map[string][]byte{
		"get":  []byte(`{"type":"object","properties":{"id":{"type":"string","pattern":"^T-[0-9]+$"}},"required":["id"],"additionalProperties":false}`),
		"same": []byte(`{"type":"object","properties":{"id":{"type":"string","pattern":"^T-[0-9]+$"}},"required":["id"],"additionalProperties":false}`),
		"bad":  []byte(`{"type":"object","properties":{"x":{"type":"nope"}}}`),
		"junk": []byte(`{"type":`),
		"none": nil,
	}
	allowed := map[string]bool{"get": true, "same": true, "bad": true, "junk": true, "none": true}
	calls := []struct{ name, args string }{
		{"get", `{"id":"T-1"}`}, {"get", `{"id":"X"}`}, {"get", `{}`}, {"get", `{"id":"T-1","more":1}`},
		{"same", `{"id":"T-22"}`}, {"same", `{"id":5}`},
		{"bad", `{"x":1}`}, {"junk", `{}`}, {"none", `{"anything":[1,2]}`},
	}
	cache := NewSchemaCache(8)
	for round := range 3 {
		plain := NewChecker(Policy{Allowed: allowed, Schemas: schemas})
		cached := NewChecker(Policy{Allowed: allowed, Schemas: schemas, SchemaCache: cache})
		for _, c := range calls {
			r1, _, ok1 := plain.Check(c.name, []byte(c.args))
			r2, _, ok2 := cached.Check(c.name, []byte(c.args))
			if r1 != r2 || ok1 != ok2 {
				t.Errorf("round %d, %s %s: without cache %q %v, with cache %q %v", round, c.name, c.args, r1, ok1, r2, ok2)
			}
		}
	}
	// get and same share their bytes; bad and junk are kept with their error; none has no schema.
	if got := cache.Len(); got != 3 {
		t.Errorf("cache holds %d schemas, want 3", got)
	}
	if r, _, _ := NewChecker(Policy{Allowed: allowed, Schemas: schemas, SchemaCache: cache}).Check("junk", []byte(`{}`)); r != ReasonSchemaCompile {
		t.Errorf("a schema that does not compile, from the cache: %q", r)
	}
}

// TestSchemaCacheBounds checks the size bound (least recently used out) and that a schema over
// MaxCachedSchemaBytes is compiled but not kept.
func TestSchemaCacheBounds(t *testing.T) {
	cache := NewSchemaCache(2)
	for i := range 5 {
		s := []byte(`{"type":"object","maxProperties":` + strings.Repeat("1", i+1) + `}`)
		c := NewChecker(Policy{Allowed: map[string]bool{"t": true}, Schemas: map[string][]byte{"t": s}, SchemaCache: cache})
		if r, _, ok := c.Check("t", []byte(`{"a":1}`)); !ok {
			t.Fatal(r)
		}
	}
	if cache.Len() != 2 {
		t.Errorf("cache of size 2 holds %d", cache.Len())
	}
	big := []byte(`{"type":"object","description":"` + strings.Repeat("x", MaxCachedSchemaBytes) + `","required":["a"]}`)
	c := NewChecker(Policy{Allowed: map[string]bool{"t": true}, Schemas: map[string][]byte{"t": big}, SchemaCache: NewSchemaCache(4)})
	if r, _, ok := c.Check("t", []byte(`{}`)); ok || !strings.Contains(r, "missing property") {
		t.Errorf("big schema: %q %v, want a required violation", r, ok)
	}
	if c.p.SchemaCache.Len() != 0 {
		t.Errorf("a schema over %d bytes was cached", MaxCachedSchemaBytes)
	}
	var none *SchemaCache
	if none.Len() != 0 || none.compile([]byte(`{"type":"object"}`)).s == nil {
		t.Error("a nil cache must compile without keeping")
	}
}

// TestSchemaCacheConcurrent shares one cached schema between checkers of many goroutines (run with
// -race).
func TestSchemaCacheConcurrent(t *testing.T) {
	cache := NewSchemaCache(4)
	schemas := map[string][]byte{"get": []byte(`{"type":"object","properties":{"id":{"type":"string","pattern":"^T-[0-9]+$"}},"required":["id"]}`)}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				c := NewChecker(Policy{Allowed: map[string]bool{"get": true}, Schemas: schemas, SchemaCache: cache})
				good := (g+i)%2 == 0
				args := `{"id":"T-7"}`
				if !good {
					args = `{"id":"nope"}`
				}
				if _, _, ok := c.Check("get", []byte(args)); ok != good {
					t.Errorf("%s: ok %v", args, ok)
					return
				}
			}
		})
	}
	wg.Wait()
}
