package flow

import (
	"sync"
	"time"
)

// A conversation that remembers: once a call of a conversation was refused or held by a provenance,
// scan or flow rule, a flow rule with after ["violation"] applies to the rest of it — typically
// blocking or holding every write, since an injected model tries the attacker's next step after a
// refusal. The client's next request does not carry promptgate's own rounds, so the fact is kept
// per instance, keyed as confirmation codes are bound (the conversation id, else the digest of the
// first user message).

// DefaultViolationTTL is how long a conversation is remembered as caught.
const DefaultViolationTTL = 24 * time.Hour

// DefaultViolations is the capacity of a Violations made with a size of 0.
const DefaultViolations = 100000

// Violations remembers the conversations in which a call broke a provenance, scan or flow rule. It
// is bounded: when full, the entry closest to expiry is forgotten first. Safe for concurrent use.
type Violations struct {
	mu  sync.Mutex
	max int
	ttl time.Duration
	m   map[string]time.Time
	now func() time.Time
}

// NewViolations returns an empty memory for at most max conversations (0: DefaultViolations), each
// kept for ttl (0: DefaultViolationTTL); now nil is time.Now.
func NewViolations(max int, ttl time.Duration, now func() time.Time) *Violations {
	if max <= 0 {
		max = DefaultViolations
	}
	if ttl <= 0 {
		ttl = DefaultViolationTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Violations{max: max, ttl: ttl, m: map[string]time.Time{}, now: now}
}

// seen reports whether the conversation key is remembered as caught.
func (v *Violations) seen(key string) bool {
	if v == nil || key == "" {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	until, ok := v.m[key]
	return ok && v.now().Before(until)
}

// record remembers the conversation key as caught, for the memory's TTL from now.
func (v *Violations) record(key string) {
	if v == nil || key == "" {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	if _, ok := v.m[key]; !ok && len(v.m) >= v.max {
		v.evict(now)
	}
	v.m[key] = now.Add(v.ttl)
}

// evict forgets the expired entries, or, when none has expired, the one closest to expiry.
func (v *Violations) evict(now time.Time) {
	var oldest string
	var oldestAt time.Time
	for k, until := range v.m {
		if !now.Before(until) {
			delete(v.m, k)
			continue
		}
		if oldest == "" || until.Before(oldestAt) {
			oldest, oldestAt = k, until
		}
	}
	if len(v.m) >= v.max && oldest != "" {
		delete(v.m, oldest)
	}
}

// Len is how many conversations are remembered (expired ones included until they are evicted).
func (v *Violations) Len() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.m)
}

// caughtReason is why a conversation counts as caught, or "".
func (c *Conversation) caughtReason() string {
	switch {
	case c.caught != "":
		return c.caught
	case c.memKey == "" && c.unseen != "":
		return "part of the history is not visible (" + c.unseen + ") and a refused call in it cannot be ruled out"
	}
	return ""
}

// noteViolation records that a call of this conversation broke a provenance, scan or flow rule
// (blocked or held): later calls of the conversation, in this request and the next, see it.
func (c *Conversation) noteViolation(res Result) {
	if res.Verdict != VerdictBlocked && res.Verdict != VerdictHeld {
		return
	}
	for _, d := range res.Decisions {
		switch d.Kind {
		case KindProvenance, KindFlow, KindToolCall:
			if d.Rule == "" {
				continue
			}
			if c.caught == "" {
				c.caught = "a call of this conversation was refused or held by rule " + d.Rule
			}
			if !c.shadow {
				c.violations.record(c.memKey)
			}
			return
		}
	}
}
