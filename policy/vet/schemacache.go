package vet

import (
	"bytes"
	"crypto/sha256"

	lru "github.com/hashicorp/golang-lru/v2"
)

// SchemaCache keeps compiled tool schemas (for the general engine and the subset validator) by the
// sha256 of their bytes, so that a schema a client sends with every request is compiled once, not
// once per response. It holds at most its size in schemas (least recently used first out) and never
// a schema larger than MaxCachedSchemaBytes. A compile error is kept too: the same bytes always
// fail the same way. It is safe for concurrent use; the zero of *SchemaCache (nil) caches nothing.
type SchemaCache struct {
	c *lru.Cache[[sha256.Size]byte, *compiledSchema]
}

// Defaults of the schema cache.
const (
	// DefaultSchemaCacheSize is the number of distinct schemas a proxy keeps compiled.
	DefaultSchemaCacheSize = 1024
	// MaxCachedSchemaBytes is the largest schema kept; a larger one is compiled for each checker.
	MaxCachedSchemaBytes = 64 << 10
)

// NewSchemaCache returns a cache of at most size compiled schemas; size < 1 means
// DefaultSchemaCacheSize.
func NewSchemaCache(size int) *SchemaCache {
	if size < 1 {
		size = DefaultSchemaCacheSize
	}
	c, err := lru.New[[sha256.Size]byte, *compiledSchema](size)
	if err != nil {
		panic("vet: schema cache: " + err.Error()) // only for size < 1, excluded above
	}
	return &SchemaCache{c: c}
}

// Len is the number of schemas held.
func (s *SchemaCache) Len() int {
	if s == nil {
		return 0
	}
	return s.c.Len()
}

// compile returns the compiled schema of raw, from the cache when it is there.
func (s *SchemaCache) compile(raw []byte) *compiledSchema {
	if s == nil || len(raw) > MaxCachedSchemaBytes || len(bytes.TrimSpace(raw)) == 0 {
		return newCompiledSchema(raw)
	}
	key := sha256.Sum256(raw)
	if cs, ok := s.c.Get(key); ok {
		return cs
	}
	cs := newCompiledSchema(raw)
	s.c.Add(key, cs)
	return cs
}
