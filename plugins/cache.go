package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/ristretto/v2"

	"github.com/promptgate/promptgate/plugins/internal/answer"
	"github.com/promptgate/promptgate/plugins/sdk"
)

// answerCache holds answers by cacheKey. ristretto's Close must not run during another call, so
// every call holds mu for reading and close holds it for writing; after close the cache is
// empty and ignores sets.
type answerCache struct {
	mu     sync.RWMutex
	c      *ristretto.Cache[string, *answer.Answer]
	closed bool
}

func newAnswerCache(maxBytes int64) (*answerCache, error) {
	c, err := ristretto.NewCache(&ristretto.Config[string, *answer.Answer]{
		NumCounters:        max(maxBytes/100, 1000), // ~10 counters per answer of ~1 KiB
		MaxCost:            maxBytes,
		BufferItems:        64,
		IgnoreInternalCost: true,
	})
	if err != nil {
		return nil, err
	}
	return &answerCache{c: c}, nil
}

func (a *answerCache) get(key string) (*answer.Answer, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return nil, false
	}
	return a.c.Get(key)
}

// set stores an answer for ttl, costed at its size, and waits until a get can see it (ristretto
// applies sets asynchronously). ristretto may still refuse it (admission policy) when full.
func (a *answerCache) set(key string, v *answer.Answer, ttl time.Duration) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		return
	}
	if a.c.SetWithTTL(key, v, int64(max(v.Size, 1)), ttl) {
		a.c.Wait()
	}
}

func (a *answerCache) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed {
		a.closed = true
		a.c.Close()
	}
}

// cacheKey is (source, user, conversation, protocol, mode), each part length-prefixed so that no
// two tuples share a key; for a source that receives the latest user message, a hash of that
// message is added (else a new question would get the previous answer).
func cacheKey(name string, r sdk.Request) string {
	var b strings.Builder
	for _, part := range []string{name, r.User, r.Conversation, r.Protocol, string(r.Mode)} {
		b.WriteString(strconv.Itoa(len(part)))
		b.WriteByte(':')
		b.WriteString(part)
	}
	if r.LatestUser != "" {
		sum := sha256.Sum256([]byte(r.LatestUser))
		b.WriteString(hex.EncodeToString(sum[:16]))
	}
	return b.String()
}
