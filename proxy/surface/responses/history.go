package responses

import (
	"bytes"
	"container/list"
	"sync"

	"github.com/tidwall/gjson"
)

// A Responses request that continues with previous_response_id carries only its new input: the rest
// of the conversation is upstream, out of the body's sight. The information-flow rules
// (policy/flow) need it — the user's earlier messages are where a value's provenance usually lies,
// the calls already made count against a budget, a confirmation code answers a notice shown
// earlier. Asking the upstream for it would cost two more round trips per request (the stored input
// items and output) and would show the calls promptgate refused, not the notices the client was
// shown. So the surface keeps its own record, per response id, of what it relayed: the request's
// input items as the client sent them and the output as the client was shown it, with the id the
// request continued. A continuing request's history is that chain, oldest first; where a link is
// missing (forgotten, another instance served it, the response was not created through promptgate,
// or the protocol then had no information-flow rule), the history is not known and the rules count
// it as unseen: fail closed. The record is kept only for requests whose protocol has
// information-flow rules and that let the upstream store the response (store is not false), and it
// is bounded by count and by bytes, the least recently used forgotten first.

// defaultHistoryBytes bounds what the record of relayed conversations holds.
const defaultHistoryBytes = 64 << 20

// historyMemory is the record of relayed conversations. Safe for concurrent use.
type historyMemory struct {
	mu              sync.Mutex
	max             int
	bytes, maxBytes int
	byID            map[string]*list.Element
	order           *list.List // of *histEntry, least recently used at the front
}

// histEntry is what one response added to its conversation.
type histEntry struct {
	id, prev string
	// items is a JSON array: the request's input items, then the response's output as shown.
	items []byte
}

func newHistoryMemory(max int) *historyMemory {
	if max <= 0 {
		max = defaultStoredResponses
	}
	return &historyMemory{max: max, maxBytes: defaultHistoryBytes, byID: map[string]*list.Element{}, order: list.New()}
}

// record keeps what response id added to the conversation that continued prev ("" when it started
// one). The first record of an id stays.
func (m *historyMemory) record(id, prev string, items []byte) {
	if id == "" || len(items) > m.maxBytes {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byID[id]; ok {
		return
	}
	for m.order.Len() > 0 && (m.order.Len() >= m.max || m.bytes+len(items) > m.maxBytes) {
		oldest := m.order.Front()
		e := oldest.Value.(*histEntry)
		m.bytes -= len(e.items)
		delete(m.byID, e.id)
		m.order.Remove(oldest)
	}
	m.byID[id] = m.order.PushBack(&histEntry{id: id, prev: prev, items: items})
	m.bytes += len(items)
}

// chain returns the conversation up to and including response id, as one JSON array of items,
// oldest first; nil when a link of it is not known.
func (m *historyMemory) chain(id string) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	var parts [][]byte
	var used []*list.Element
	size := 2
	for n := 0; id != ""; n++ {
		el, ok := m.byID[id]
		if !ok || n >= m.max {
			return nil
		}
		used = append(used, el)
		e := el.Value.(*histEntry)
		if inner := bytes.TrimSpace(e.items[1 : len(e.items)-1]); len(inner) > 0 {
			parts = append(parts, inner)
			size += len(inner) + 1
		}
		id = e.prev
	}
	for i := len(used) - 1; i >= 0; i-- {
		m.order.MoveToBack(used[i]) // the chain is in use, its newest turn the most recently
	}
	out := make([]byte, 0, size)
	out = append(out, '[')
	for i := len(parts) - 1; i >= 0; i-- {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, parts[i]...)
	}
	return append(out, ']')
}

// turnItems is the JSON array of what one request and its response add to the conversation: the
// request's input (a string input is one user message) and the output shown. nil when either is not
// of its shape.
func turnItems(input gjson.Result, output []byte) []byte {
	out := gjson.ParseBytes(output)
	if !out.IsArray() {
		return nil
	}
	var items []string
	switch {
	case input.Type == gjson.String:
		msg := append([]byte(`{"role":"user","content":`), input.Raw...)
		items = append(items, string(append(msg, '}')))
	case input.IsArray():
		input.ForEach(func(_, it gjson.Result) bool {
			items = append(items, it.Raw)
			return true
		})
	case input.Exists() && input.Type != gjson.Null:
		return nil
	}
	out.ForEach(func(_, it gjson.Result) bool {
		items = append(items, it.Raw)
		return true
	})
	b := []byte{'['}
	for i, it := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	return append(b, ']')
}
