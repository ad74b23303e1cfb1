package store

import (
	"slices"
	"sync"
)

// Watchers holds the callbacks registered with a backend's Watch and calls them, oldest first. The
// zero value is ready to use; it is safe for concurrent use.
type Watchers struct {
	mu   sync.Mutex
	next uint64
	fns  map[uint64]func()
}

// Add registers fn and returns its idempotent cancel. A nil fn registers nothing.
func (w *Watchers) Add(fn func()) (cancel func()) {
	if fn == nil {
		return func() {}
	}
	w.mu.Lock()
	if w.fns == nil {
		w.fns = map[uint64]func(){}
	}
	id := w.next
	w.next++
	w.fns[id] = fn
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			delete(w.fns, id)
			w.mu.Unlock()
		})
	}
}

// Notify calls every registered callback, in the order they were added, outside the lock (a
// callback may Add or cancel).
func (w *Watchers) Notify() {
	w.mu.Lock()
	ids := make([]uint64, 0, len(w.fns))
	for id := range w.fns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	fns := make([]func(), len(ids))
	for i, id := range ids {
		fns[i] = w.fns[id]
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Clear drops every callback (Close).
func (w *Watchers) Clear() {
	w.mu.Lock()
	clear(w.fns)
	w.mu.Unlock()
}
