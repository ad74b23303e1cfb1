// Package toolseen remembers the tools that recent requests declared — kept or removed, under which
// protocol, when, and how many of the model's calls of them were blocked — in memory, bounded by a
// number of names (the least recently seen are forgotten first), so that the admin API can list the
// tools an instance has seen.
//
// It owns that memory only. It does not decide whether a tool is allowed (policy/), keep decisions
// (the audit log) or serve the list (proxy/admin). It is per instance and starts empty at every
// start.
package toolseen

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/promptgate/promptgate/policy"
)

// Bounds of a Memory.
const (
	// DefaultNames is how many tool names a Memory keeps when New is given 0.
	DefaultNames = 1000
	// MaxNameBytes is the longest name remembered; longer names (no operator can switch them off:
	// the kill switch takes at most 256 bytes) are not.
	MaxNameBytes = 256
)

// Sighting is what is remembered of one tool name.
type Sighting struct {
	Name string `json:"name"`
	// LastSeen is when a request last declared it.
	LastSeen time.Time `json:"lastSeen"`
	// Requests counts the requests that declared it, Removed those of them that had it removed.
	Requests uint64 `json:"requests"`
	Removed  uint64 `json:"removed"`
	// LastProtocol is the protocol of the last request that declared it.
	LastProtocol string `json:"lastProtocol"`
	// LastKept says whether that request kept it; LastReason is why it was removed when it was not.
	LastKept   bool   `json:"lastKept"`
	LastReason string `json:"lastReason,omitempty"`
	// Blocked counts the calls of it that answers had blocked (a request kept it, the call broke a
	// rule); LastBlocked is when the last one was.
	Blocked     uint64    `json:"blocked"`
	LastBlocked time.Time `json:"lastBlocked,omitzero"`
}

// Memory is the set of sightings; its methods are safe for concurrent use. A nil *Memory remembers
// nothing.
type Memory struct {
	mu  sync.Mutex
	lru *simplelru.LRU[string, *Sighting]
	now func() time.Time
}

// New returns a Memory that keeps at most names tool names (0 means DefaultNames).
func New(names int) *Memory {
	if names <= 0 {
		names = DefaultNames
	}
	l, err := simplelru.NewLRU[string, *Sighting](names, nil)
	if err != nil { // only for a size below 1, excluded above
		panic(err)
	}
	return &Memory{lru: l, now: time.Now}
}

// Saw records one request's declared tools: those kept and those removed (with why), under
// protocol.
func (m *Memory) Saw(protocol string, kept []policy.Tool, removed []policy.Removal) {
	if m == nil || len(kept)+len(removed) == 0 {
		return
	}
	now := m.now().UTC()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range kept {
		m.add(t.Name, protocol, now, true, "")
	}
	for _, r := range removed {
		m.add(r.Name, protocol, now, false, r.Reason)
	}
}

func (m *Memory) add(name, protocol string, now time.Time, kept bool, reason string) {
	if name == "" || len(name) > MaxNameBytes {
		return
	}
	s, ok := m.lru.Get(name)
	if !ok {
		s = &Sighting{Name: strings.Clone(name)}
		m.lru.Add(s.Name, s)
	}
	s.LastSeen, s.LastProtocol, s.LastKept, s.LastReason = now, protocol, kept, reason
	s.Requests++
	if !kept {
		s.Removed++
	}
}

// Blocked records one call of name that an answer had blocked. Only a name a request declared is
// counted: the model's answer, not the operator or the app, chooses the names of its calls, so they
// add no entry.
func (m *Memory) Blocked(name string) {
	if m == nil {
		return
	}
	now := m.now().UTC()
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.lru.Peek(name); ok {
		s.Blocked++
		s.LastBlocked = now
	}
}

// List returns a copy of every sighting, the most recently seen first (ties by name).
func (m *Memory) List() []Sighting {
	if m == nil {
		return []Sighting{}
	}
	m.mu.Lock()
	out := make([]Sighting, 0, m.lru.Len())
	for _, s := range m.lru.Values() {
		out = append(out, *s)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Sighting) int {
		if c := b.LastSeen.Compare(a.LastSeen); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
