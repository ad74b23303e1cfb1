package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy/mcppin"
	"github.com/promptgate/promptgate/store"
)

// definitionOf reads one tool of a tools/list answer; false when it has no name, or a description
// that is not text (which clients read each their own way, or not at all).
func definitionOf(v gjson.Result) (mcppin.Definition, bool) {
	name, desc := v.Get("name"), v.Get("description")
	if name.Type != gjson.String || name.Str == "" || desc.Exists() && desc.Type != gjson.String {
		return mcppin.Definition{}, false
	}
	d := mcppin.Definition{Name: name.Str, Description: desc.Str}
	if s := v.Get("inputSchema"); s.Exists() {
		d.InputSchema = []byte(s.Raw)
	}
	d.Extra = otherMembers(v)
	d.Digest = mcppin.Digest(d)
	d.Findings = scanDefinition(d)
	return d, true
}

// ownMembers are the members of a tool definition the door reads itself; every other member is
// pinned as the definition's Extra.
var ownMembers = []string{"name", "description", "inputSchema"}

// otherMembers writes a definition's members other than its own as one JSON object, as the server
// wrote them; nil when it has none.
func otherMembers(v gjson.Result) json.RawMessage {
	var b []byte
	v.ForEach(func(k, val gjson.Result) bool {
		if slices.Contains(ownMembers, k.Str) {
			return true
		}
		if b == nil {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(append(append(b, k.Raw...), ':'), val.Raw...)
		return true
	})
	if b == nil {
		return nil
	}
	return append(b, '}')
}

// Pin is one tool of one server as the door holds it: the definition pinned (by the first
// tools/list or an operator), and a different one seen since and not approved.
type Pin struct {
	Server string `json:"server"`
	Tool   string `json:"tool"`
	// Pinned is the definition calls are vetted against; nil while none is approved.
	Pinned *mcppin.Definition `json:"pinned"`
	// Version is the version of the server's pin set that holds Pinned (0: none).
	Version int `json:"version"`
	// PinnedAt and PinnedBy say when and by whom (mcppin.FirstList for a first tools/list).
	PinnedAt time.Time `json:"pinnedAt,omitzero"`
	PinnedBy string    `json:"pinnedBy,omitempty"`
	// Pending is the definition the server lists now, where it differs from Pinned (or was flagged
	// on first sight); nil when there is none. Pending definitions are this instance's: each
	// instance reads the server's list itself.
	Pending *mcppin.Definition `json:"pending,omitempty"`
	// SeenAt is when Pending was first seen.
	SeenAt time.Time `json:"seenAt,omitzero"`
}

// PinStore keeps the door's pins as the store's mcppins kind: one versioned set per server, a first
// pin and an approval each a new version (store.Store implements it).
type PinStore interface {
	AddVersion(ctx context.Context, kind store.Kind, body []byte, author, note string) (int, error)
	ActivateIf(ctx context.Context, kind store.Kind, name string, version, expected int) error
	Active(ctx context.Context, kind store.Kind, name string) (store.Record, error)
	Entry(ctx context.Context, kind store.Kind, name string) (store.Entry, error)
}

// Pins holds the pinned definitions of every server: a cache over the store's active sets (read
// from Active, which the definitions snapshot keeps current, so a restart and every instance of a
// fleet see the same pins, an activation or rollback of a set included), and the pending
// definitions this instance has seen. Without a store it keeps the sets in memory. Safe for
// concurrent use.
type Pins struct {
	mu      sync.Mutex
	servers map[string]*serverPins
	o       PinsOptions
	// wmu makes one write to the store at a time, so that this instance's versions chain.
	wmu sync.Mutex
}

// PinsOptions configure NewPins.
type PinsOptions struct {
	// Store keeps the sets; nil keeps them in memory (lost at a restart, per instance).
	Store PinStore
	// Active is the active set of a server (proxy.Engine.PinSet); required with Store.
	Active func(server string) (store.Record, bool)
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// serverPins is one server's pins.
type serverPins struct {
	set mcppin.Set
	// version is the set's version in the store (counted here without a store); 0 before the first
	// pin.
	version int
	// seen is the version Active gave when last read: a set is taken from Active when Active gives
	// another one (an activation elsewhere, a rollback), not while it lags behind this instance's
	// write.
	seen    int
	pending map[string]pendingDef
	// fresh is whether the server's list was read since it last changed (or its set was moved).
	fresh bool
}

type pendingDef struct {
	def    mcppin.Definition
	seenAt time.Time
}

// NewPins returns the pins of servers (their labels).
func NewPins(o PinsOptions, servers ...string) *Pins {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Active == nil {
		o.Store = nil
	}
	p := &Pins{servers: map[string]*serverPins{}, o: o}
	for _, s := range servers {
		p.servers[s] = &serverPins{set: mcppin.Set{Server: s}, pending: map[string]pendingDef{}}
	}
	return p
}

// server is the pins of a server, brought up to the store's active set. Called with p.mu held.
func (p *Pins) server(name string) *serverPins {
	sp := p.servers[name]
	if sp == nil {
		sp = &serverPins{set: mcppin.Set{Server: name}, pending: map[string]pendingDef{}}
		p.servers[name] = sp
	}
	if p.o.Store == nil {
		return sp
	}
	rec, ok := p.o.Active(name)
	if !ok || rec.Version == sp.seen {
		return sp
	}
	sp.seen = rec.Version
	if rec.Version == sp.version {
		return sp
	}
	set, err := mcppin.Parse(rec.Body)
	if err != nil || set.Server != name {
		p.o.Log.Error("mcp: the active pin set does not parse; the door keeps the pins it had", "server", name, "version", rec.Version, "err", err)
		return sp
	}
	sp.set, sp.version = set, rec.Version
	sp.fresh = false // the server's list is read again against the set now active
	for tool, pd := range sp.pending {
		if t, ok := set.Tool(tool); ok && t.Digest == pd.def.Digest {
			delete(sp.pending, tool)
		}
	}
	return sp
}

// Observed is what a listed definition is to the door.
type Observed int

// The outcomes of Observe.
const (
	// Same: the pinned definition.
	Same Observed = iota
	// First: seen for the first time, pinned now.
	First
	// Held: seen for the first time but flagged by the scan: not pinned, waiting for approval.
	Held
	// Changed: differs from the pinned one (reported; held back in block mode).
	Changed
)

// Seen is one listed definition as the door found it; News is true the first time a definition is
// seen (pinned, or pending with this digest), for the decision log to record it once.
type Seen struct {
	Def     mcppin.Definition
	Outcome Observed
	News    bool
}

// Observe compares the definitions a server listed with its pins. The first-seen ones are pinned
// together, as one new version of the server's set, unless the scan flagged their description (then
// they wait for approval, as a changed one does). A store that cannot be written is logged; the
// pins hold in this instance meanwhile.
func (p *Pins) Observe(ctx context.Context, server string, defs []mcppin.Definition) []Seen {
	out := make([]Seen, len(defs))
	var first []mcppin.Tool
	p.mu.Lock()
	sp := p.server(server)
	now := p.o.Now()
	for i, d := range defs {
		out[i] = Seen{Def: d}
		pinned, ok := sp.set.Tool(d.Name)
		switch {
		case !ok && len(d.Findings) == 0:
			out[i].Outcome, out[i].News = First, true
			first = append(first, mcppin.Tool{Definition: d, PinnedAt: now, PinnedBy: mcppin.FirstList})
			continue
		case ok && pinned.Digest == d.Digest:
			delete(sp.pending, d.Name)
			continue
		}
		if pd, had := sp.pending[d.Name]; !had || pd.def.Digest != d.Digest {
			sp.pending[d.Name] = pendingDef{def: d, seenAt: now}
			out[i].News = true
		}
		out[i].Outcome = Changed
		if !ok {
			out[i].Outcome = Held
		}
	}
	p.mu.Unlock()
	if len(first) > 0 {
		names := make([]string, len(first))
		for i, t := range first {
			names[i] = t.Name
		}
		note := fmt.Sprintf("first tools/list: %d definition(s) pinned", len(first))
		change := addAbsent(first)
		if _, err := p.write(ctx, server, mcppin.FirstList, note, change); err != nil {
			p.keep(server, change)
			p.o.Log.Warn("mcp: first pins not stored; they hold in this instance", "server", server, "tools", len(names), "err", err)
		}
	}
	return out
}

// addAbsent is the change that pins each of tools where the set has no definition of it yet
// (another instance, or an operator, may have pinned it since it was seen).
func addAbsent(tools []mcppin.Tool) func(mcppin.Set) mcppin.Set {
	return func(s mcppin.Set) mcppin.Set {
		for _, t := range tools {
			if _, ok := s.Tool(t.Name); !ok {
				s = s.With(t)
			}
		}
		return s
	}
}

// maxWriteTries bounds how often a write is made again on the set another writer activated
// meanwhile; each try waits a little longer, at random, so that writers racing for one set take
// turns.
const maxWriteTries = 32

// write applies change to the server's active set and makes the result the active version, in the
// store when there is one: the store activates it only over the version it was derived from, and
// where another writer moved the set meanwhile the change is applied again to the set that writer
// left, so that no write is lost. Where the store fails, this instance's pins are left as they
// were.
func (p *Pins) write(ctx context.Context, server, author, note string, change func(mcppin.Set) mcppin.Set) (mcppin.Set, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.o.Store == nil {
		p.mu.Lock()
		sp := p.server(server)
		next, v := change(sp.set), sp.version+1
		p.mu.Unlock()
		p.adopt(server, next, v)
		return next, nil
	}
	var err error
	for try := 0; try < maxWriteTries; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return mcppin.Set{}, fmt.Errorf("mcp: pins of %s: %w", server, ctx.Err())
			case <-time.After(rand.N(time.Duration(try) * 2 * time.Millisecond)):
			}
		}
		base, baseV := mcppin.Set{Server: server}, 0
		rec, aerr := p.o.Store.Active(ctx, store.KindMCPPins, server)
		switch {
		case aerr == nil:
			if base, err = mcppin.Parse(rec.Body); err != nil {
				return mcppin.Set{}, fmt.Errorf("mcp: pins of %s: the active set: %w", server, err)
			}
			baseV = rec.Version
		case !errors.Is(aerr, store.ErrNotFound):
			return mcppin.Set{}, fmt.Errorf("mcp: pins of %s: %w", server, aerr)
		}
		next := change(base)
		var v int
		if v, err = p.o.Store.AddVersion(ctx, store.KindMCPPins, next.Marshal(), author, note); err != nil {
			return mcppin.Set{}, fmt.Errorf("mcp: pins of %s: %w", server, err)
		}
		switch err = p.o.Store.ActivateIf(ctx, store.KindMCPPins, server, v, baseV); {
		case err == nil:
			p.adopt(server, next, v)
			return next, nil
		case !errors.Is(err, store.ErrConflict):
			return mcppin.Set{}, fmt.Errorf("mcp: pins of %s: %w", server, err)
		}
	}
	return mcppin.Set{}, fmt.Errorf("mcp: pins of %s: the set kept moving under this write: %w", server, err)
}

// keep applies a change the store did not take to this instance's pins.
func (p *Pins) keep(server string, change func(mcppin.Set) mcppin.Set) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sp := p.servers[server]
	sp.set = change(sp.set)
}

// adopt makes set (version v) the server's pins in this instance.
func (p *Pins) adopt(server string, set mcppin.Set, v int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sp := p.servers[server]
	sp.set, sp.version = set, v
	for tool, pd := range sp.pending {
		if t, ok := set.Tool(tool); ok && t.Digest == pd.def.Digest {
			delete(sp.pending, tool)
		}
	}
}

// view is the Pin of one tool. Called with p.mu held.
func view(server string, sp *serverPins, tool string) (Pin, bool) {
	pin := Pin{Server: server, Tool: tool}
	t, pinned := sp.set.Tool(tool)
	if pinned {
		def := t.Definition
		pin.Pinned, pin.Version, pin.PinnedAt, pin.PinnedBy = &def, sp.version, t.PinnedAt, t.PinnedBy
	}
	pd, pending := sp.pending[tool]
	if pending {
		def := pd.def
		pin.Pending, pin.SeenAt = &def, pd.seenAt
	}
	return pin, pinned || pending
}

// Tool is the pin of one tool; false when the server's set has none and none is pending.
func (p *Pins) Tool(server, tool string) (Pin, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return view(server, p.server(server), tool)
}

// Approve pins the pending definition of a tool whose digest is digest (the one the operator
// reviewed), as a new version of the server's set; false when there is no such pending definition.
// Where the store does not take it, nothing is pinned and err says why.
func (p *Pins) Approve(ctx context.Context, server, tool, digest, by string) (Pin, bool, error) {
	p.mu.Lock()
	sp := p.server(server)
	pd, ok := sp.pending[tool]
	p.mu.Unlock()
	if !ok || pd.def.Digest != digest {
		return Pin{}, false, nil
	}
	t := mcppin.Tool{Definition: pd.def, PinnedAt: p.o.Now(), PinnedBy: by}
	note := "approved " + tool + " sha256:" + digest[:min(16, len(digest))]
	_, err := p.write(ctx, server, by, note, func(s mcppin.Set) mcppin.Set { return s.With(t) })
	p.mu.Lock()
	defer p.mu.Unlock()
	pin, _ := view(server, p.servers[server], tool)
	return pin, true, err
}

// List returns every pin of the servers, by server then tool.
func (p *Pins) List() []Pin {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Pin
	for name := range p.servers {
		sp := p.server(name)
		tools := map[string]bool{}
		for _, t := range sp.set.Tools {
			tools[t.Name] = true
		}
		for t := range sp.pending {
			tools[t] = true
		}
		for t := range tools {
			pin, _ := view(name, sp, t)
			out = append(out, pin)
		}
	}
	slices.SortFunc(out, func(a, b Pin) int {
		if c := strings.Compare(a.Server, b.Server); c != 0 {
			return c
		}
		return strings.Compare(a.Tool, b.Tool)
	})
	return out
}

// Version is the version of a server's active pin set (0 before the first pin).
func (p *Pins) Version(server string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.server(server).version
}

// Versions are the versions of a server's pin set in the store; false without a store.
func (p *Pins) Versions(ctx context.Context, server string) (store.Entry, bool, error) {
	if p.o.Store == nil {
		return store.Entry{}, false, nil
	}
	e, err := p.o.Store.Entry(ctx, store.KindMCPPins, server)
	if errors.Is(err, store.ErrNotFound) {
		return store.Entry{Name: server, Versions: []store.VersionInfo{}}, true, nil
	}
	return e, err == nil, err
}

// Fresh reports whether the server's list was read since it last changed (or its pin set was
// moved).
func (p *Pins) Fresh(server string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.server(server).fresh
}

// SetFresh records that the server's list was read (true) or changed (false).
func (p *Pins) SetFresh(server string, fresh bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.server(server).fresh = fresh
}
