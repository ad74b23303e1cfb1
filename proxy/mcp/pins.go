package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow"
)

// Definition is one tool as an MCP server lists it: what the model is told (name, description) and what
// its calls are vetted against (the input schema).
type Definition struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// InputSchema is the raw JSON of the tool's inputSchema.
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// Digest is the hex SHA-256 of the name, the description and the input schema in canonical JSON.
	Digest string `json:"digest"`
	// Findings are what the injection scan found in the description (see scanDescription).
	Findings []string `json:"findings,omitempty"`
}

// definitionOf reads one tool of a tools/list answer; false when it has no name.
func definitionOf(v gjson.Result) (Definition, bool) {
	name := v.Get("name")
	if name.Type != gjson.String || name.Str == "" {
		return Definition{}, false
	}
	d := Definition{Name: name.Str, Description: v.Get("description").String()}
	if s := v.Get("inputSchema"); s.Exists() {
		d.InputSchema = []byte(s.Raw)
	}
	d.Digest = digestOf(d)
	d.Findings = scanDescription(d.Description)
	return d, true
}

// digestOf is the digest of a definition: key order and white space in its schema do not count.
func digestOf(d Definition) string {
	h := sha256.New()
	for _, s := range []string{d.Name, d.Description} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if len(d.InputSchema) > 0 {
		if sum, err := flow.ArgsDigest(gjson.ParseBytes(d.InputSchema)); err == nil {
			h.Write(sum[:])
		} else {
			h.Write(d.InputSchema) // not an object: its bytes as they are
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Pin is one tool of one server as the door holds it: the definition the operator (or the first
// tools/list) pinned, and a different one seen since and not approved.
type Pin struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Pinned is the definition calls are vetted against; nil while none is approved.
	Pinned *Definition `json:"pinned"`
	// Version counts the definitions pinned for this tool, from 1.
	Version int `json:"version"`
	// PinnedAt and PinnedBy say when and by whom (the first tools/list is "first-list").
	PinnedAt time.Time `json:"pinnedAt"`
	PinnedBy string    `json:"pinnedBy"`
	// Pending is the definition the server lists now, where it differs from Pinned (or was flagged on
	// first sight); nil when there is none.
	Pending *Definition `json:"pending,omitempty"`
	// SeenAt is when Pending was first seen.
	SeenAt time.Time `json:"seenAt,omitzero"`
	// History are the definitions pinned before, oldest first (at most maxHistory).
	History []Definition `json:"history,omitempty"`
}

// maxHistory bounds the earlier definitions kept per tool.
const maxHistory = 16

// pinBy is who pinned a first-seen definition.
const pinBy = "first-list"

// Pins holds the pinned definitions of every server. Safe for concurrent use.
type Pins struct {
	mu   sync.Mutex
	pins map[string]map[string]*Pin // server -> tool -> pin
	// stale marks the servers whose list changed (notifications/tools/list_changed) or was never read.
	fresh map[string]bool
	now   func() time.Time
}

// NewPins returns an empty set; now nil is time.Now.
func NewPins(now func() time.Time) *Pins {
	if now == nil {
		now = time.Now
	}
	return &Pins{pins: map[string]map[string]*Pin{}, fresh: map[string]bool{}, now: now}
}

// Observed is what a listed definition is to the door.
type Observed int

// The outcomes of Observe.
const (
	// Same: the pinned definition.
	Same Observed = iota
	// First: seen for the first time, pinned now.
	First
	// Held: seen for the first time but flagged by the scan, or changed: not pinned, held back in block mode.
	Held
	// Changed: differs from the pinned one (reported; held back in block mode).
	Changed
)

// Observe compares a listed definition with the server's pin: a first one is pinned unless the scan
// flagged its description (then it waits for approval, as a changed one does). news is true the first time
// a definition is seen (pinned, or pending with this digest), for the decision log to record it once.
func (p *Pins) Observe(server string, d Definition) (o Observed, news bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tools := p.pins[server]
	if tools == nil {
		tools = map[string]*Pin{}
		p.pins[server] = tools
	}
	pin := tools[d.Name]
	now := p.now()
	switch {
	case pin == nil && len(d.Findings) == 0:
		tools[d.Name] = &Pin{Server: server, Tool: d.Name, Pinned: &d, Version: 1, PinnedAt: now, PinnedBy: pinBy}
		return First, true
	case pin == nil:
		tools[d.Name] = &Pin{Server: server, Tool: d.Name, Pending: &d, SeenAt: now}
		return Held, true
	case pin.Pinned != nil && pin.Pinned.Digest == d.Digest:
		pin.Pending = nil
		return Same, false
	}
	if pin.Pending == nil || pin.Pending.Digest != d.Digest {
		pin.Pending, pin.SeenAt, news = &d, now, true
	}
	if pin.Pinned == nil {
		return Held, news
	}
	return Changed, news
}

// Tool is the pin of one tool; false when the server never listed it.
func (p *Pins) Tool(server, tool string) (Pin, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pin := p.pins[server][tool]
	if pin == nil {
		return Pin{}, false
	}
	return *pin, true
}

// Approve pins the pending definition of a tool whose digest is digest (the one the operator looked at);
// false when there is no such pending definition.
func (p *Pins) Approve(server, tool, digest, by string) (Pin, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pin := p.pins[server][tool]
	if pin == nil || pin.Pending == nil || pin.Pending.Digest != digest {
		return Pin{}, false
	}
	if pin.Pinned != nil {
		pin.History = append(pin.History, *pin.Pinned)
		if len(pin.History) > maxHistory {
			pin.History = slices.Clone(pin.History[len(pin.History)-maxHistory:])
		}
	}
	pin.Pinned, pin.Pending = pin.Pending, nil
	pin.Version++
	pin.PinnedAt, pin.PinnedBy = p.now(), by
	return *pin, true
}

// List returns every pin, by server then tool.
func (p *Pins) List() []Pin {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Pin
	for _, tools := range p.pins {
		for _, pin := range tools {
			out = append(out, *pin)
		}
	}
	slices.SortFunc(out, func(a, b Pin) int {
		if a.Server != b.Server {
			return compare(a.Server, b.Server)
		}
		return compare(a.Tool, b.Tool)
	})
	return out
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Fresh reports whether the server's list was read since it last changed.
func (p *Pins) Fresh(server string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fresh[server]
}

// SetFresh records that the server's list was read (true) or changed (false).
func (p *Pins) SetFresh(server string, fresh bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fresh[server] = fresh
}
