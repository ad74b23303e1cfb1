package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
	"github.com/promptgate/promptgate/store"
)

// catalog is one immutable snapshot of the active definitions. A request takes one snapshot when it
// starts and keeps it to the end, so an activation never changes a request in flight.
type catalog struct {
	protocols map[string]*policy.Protocol
	// shadows are the protocol versions in shadow, by id.
	shadows   map[string]*policy.Protocol
	templates map[string]store.Record
	tools     map[string]store.ToolOverride
	// pins are the active MCP pin sets, by server label.
	pins map[string]store.Record
	// plans holds what this snapshot derived from each effective protocol it has served (the merge,
	// the compiled rules, the template), so that it is made once per snapshot, not once per
	// request.
	plans sync.Map // planKey -> *plan
	// fallbacks holds the names of the templates this snapshot lacks whose embedded copy has been
	// used (and logged); names still missing are carried over to the next snapshot, so the fallback
	// is logged once each time it starts, not on every request.
	fallbacks sync.Map // template name -> struct{}
	// frames holds the fixed part of each layered prompt this snapshot has built (template text and
	// protocol rules laid out and JSON-escaped), so that it is made once per snapshot, not once per
	// request.
	frames sync.Map // assembly.FrameKey -> *assembly.Frame
}

// frame returns the frame of t for the layers and settings of a request, making it on first use. A
// nil catalog makes it every time.
func (c *catalog) frame(t *assembly.Template, l assembly.Layers, s assembly.Settings) *assembly.Frame {
	if c == nil {
		return assembly.NewFrame(t, l, s)
	}
	k := assembly.FrameKeyOf(t, l, s)
	if v, ok := c.frames.Load(k); ok {
		return v.(*assembly.Frame)
	}
	v, _ := c.frames.LoadOrStore(k, assembly.NewFrame(t, l, s))
	return v.(*assembly.Frame)
}

var (
	_ policy.Catalog        = (*catalog)(nil)
	_ policy.Enablement     = (*catalog)(nil)
	_ policy.OverrideLister = (*catalog)(nil)
)

// ToolEnabled is the operator's runtime override of a tool (the admin kill switch), if any.
func (c *catalog) ToolEnabled(name string) (enabled, set bool) {
	o, ok := c.tools[name]
	return o.Enabled, ok
}

// OverriddenTools lists the tools with a runtime override, for policy.Effective.Restriction.
func (c *catalog) OverriddenTools() []string {
	return slices.Sorted(maps.Keys(c.tools))
}

func (c *catalog) Protocol(id string) (*policy.Protocol, bool) {
	p, ok := c.protocols[id]
	return p, ok
}

// CheckProtocols returns an error naming the config key (defaultProtocol, routes[i].protocol) of
// the first protocol the config names that has no active version in the current catalog: every
// request sent to it would fail with unknown_protocol, so serve refuses to start instead.
func (d *Definitions) CheckProtocols(cfg policy.Config) error {
	c := d.snapshot()
	known := func() string { return strings.Join(slices.Sorted(maps.Keys(c.protocols)), ", ") }
	if _, ok := c.protocols[cfg.DefaultProtocol]; cfg.DefaultProtocol != "" && !ok {
		return fmt.Errorf("defaultProtocol: %q is not a protocol with an active version: name one of %s, or add it first (promptgate migrate up)", cfg.DefaultProtocol, known())
	}
	for i, r := range cfg.Routes {
		if _, ok := c.protocols[r.Protocol]; r.Protocol != "" && !ok {
			return fmt.Errorf("routes[%d].protocol: %q is not a protocol with an active version: name one of %s, or add it first (promptgate migrate up)", i, r.Protocol, known())
		}
	}
	return nil
}

// Definitions keeps the current catalog, reloads it when the store changes, and caches parsed
// templates by name@version. A reload that fails (the store did not answer) keeps the previous
// snapshot in service and is retried with backoff until one succeeds; meanwhile Stale says so.
type Definitions struct {
	store  Snapshots
	log    *slog.Logger
	cur    atomic.Pointer[catalog]
	cache  *ristretto.Cache[string, *assembly.Template]
	mu     sync.Mutex // serialises reloads
	cancel func()

	closeOnce sync.Once
	stale     atomic.Pointer[staleness] // nil while the last reload succeeded
	retry     chan struct{}             // wakes the retry loop after a failed reload
	stop      chan struct{}             // closed by Close
	done      chan struct{}             // closed when the retry loop has returned
}

// staleness is why, and since when, the catalog in service is older than the store.
type staleness struct {
	since time.Time
	err   error
}

// Reload retry backoff after a failed reload: doubling from the first to the last.
const (
	firstReloadRetry = 100 * time.Millisecond
	lastReloadRetry  = 30 * time.Second
)

// Snapshots is what Definitions reads of a store (store.Store has it): the active definitions, and
// word of every change.
type Snapshots interface {
	Snapshot(ctx context.Context) (store.Snapshot, error)
	Watch(fn func()) (cancel func())
}

// NewDefinitions loads the first snapshot and watches the store for changes. A snapshot that cannot
// be read is an error: without definitions there is no policy to enforce.
func NewDefinitions(ctx context.Context, st Snapshots, log *slog.Logger) (*Definitions, error) {
	cache, err := ristretto.NewCache(&ristretto.Config[string, *assembly.Template]{
		NumCounters: 10_000, MaxCost: 64 << 20, BufferItems: 64,
	})
	if err != nil {
		return nil, fmt.Errorf("proxy: template cache: %w", err)
	}
	d := &Definitions{store: st, log: log, cache: cache, retry: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if err := d.Reload(ctx); err != nil {
		cache.Close()
		return nil, err
	}
	go d.retryLoop()
	// A change is read at once, on the goroutine that made it (for a local change, before the
	// change's method returns: the next request sees it); only a failure is left to the retry loop.
	d.cancel = st.Watch(func() { _ = d.Reload(context.Background()) })
	return d, nil
}

// Close stops watching and retrying, and frees the cache.
func (d *Definitions) Close() {
	d.closeOnce.Do(func() {
		if d.cancel != nil {
			d.cancel()
		}
		close(d.stop)
		<-d.done
		d.cache.Close()
	})
}

// Stale describes, while the last reload has failed, why the definitions in service may be older
// than the store's; it is "" while they are current.
func (d *Definitions) Stale() string {
	st := d.stale.Load()
	if st == nil {
		return ""
	}
	return fmt.Sprintf("definitions could not be reloaded since %s (serving the previous snapshot; retrying): %v", st.since.Format(time.RFC3339), st.err)
}

// failed records a failed reload (under d.mu) and wakes the retry loop (a wake-up that finds the
// definitions current again does nothing).
func (d *Definitions) failed(err error) {
	since := time.Now().UTC()
	if prev := d.stale.Load(); prev != nil {
		since = prev.since
	}
	d.stale.Store(&staleness{since: since, err: err})
	select {
	case d.retry <- struct{}{}:
	default:
	}
}

// retryLoop retries a failed reload with backoff until one succeeds (by this loop or by a later
// change).
func (d *Definitions) retryLoop() {
	defer close(d.done)
	for {
		select {
		case <-d.stop:
			return
		case <-d.retry:
		}
		wait := firstReloadRetry
		for attempt := 1; d.stale.Load() != nil; attempt++ {
			d.log.Error("reload definitions failed; serving the previous snapshot", "err", d.stale.Load().err, "retry_in", wait)
			t := time.NewTimer(wait)
			select {
			case <-d.stop:
				t.Stop()
				return
			case <-t.C:
			}
			if err := d.Reload(context.Background()); err == nil {
				d.log.Info("reloaded definitions after failed attempts", "attempts", attempt)
			}
			wait = min(2*wait, lastReloadRetry)
		}
	}
}

// Reload reads a new snapshot from the store and swaps it in atomically. A protocol that does not
// parse is left out and logged (the store's validation hook keeps such versions from being stored).
func (d *Definitions) Reload(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	snap, err := d.store.Snapshot(ctx)
	if err != nil {
		err = fmt.Errorf("proxy: read definitions: %w", err)
		if d.cur.Load() != nil {
			d.failed(err)
		}
		return err
	}
	c := &catalog{protocols: make(map[string]*policy.Protocol, len(snap.Protocols)), templates: snap.Templates, tools: snap.Tools, pins: snap.MCPPins}
	for id, rec := range snap.Protocols {
		p, err := policy.ParseProtocol(rec.Body)
		if err != nil {
			d.log.Error("active protocol version does not parse; it is not served", "protocol", id, "version", rec.Version, "err", err)
			continue
		}
		p.Version = rec.Version
		c.protocols[id] = p
	}
	c.shadows = make(map[string]*policy.Protocol, len(snap.Shadows))
	for id, rec := range snap.Shadows {
		p, err := policy.ParseProtocol(rec.Body)
		if err != nil {
			d.log.Error("protocol version in shadow does not parse; it judges nothing", "protocol", id, "version", rec.Version, "err", err)
			continue
		}
		p.Version = rec.Version
		c.shadows[id] = p
	}
	if prev := d.cur.Load(); prev != nil {
		prev.fallbacks.Range(func(name, _ any) bool {
			if _, back := c.templates[name.(string)]; back {
				d.log.Info("template found in the DB again; the copy embedded in the binary is no longer used", "template", name)
			} else {
				c.fallbacks.Store(name, struct{}{})
			}
			return true
		})
	}
	d.cur.Store(c)
	d.stale.Store(nil)
	return nil
}

func (d *Definitions) snapshot() *catalog { return d.cur.Load() }

// PinSet is the active version of an MCP server's pinned tool definitions (store kind mcppins) in
// the current snapshot; false when the server has none.
func (d *Definitions) PinSet(server string) (store.Record, bool) {
	c := d.cur.Load()
	if c == nil {
		return store.Record{}, false
	}
	rec, ok := c.pins[server]
	return rec, ok
}

// errNoTemplate is returned when neither the DB nor the binary has a template.
var errNoTemplate = errors.New("template not found")

// template returns the parsed active template of the snapshot; when the DB lacks it, the copy
// embedded in the binary (version 0) is used, and logged when it starts being used (not on every
// request).
func (d *Definitions) template(c *catalog, name string) (*assembly.Template, error) {
	rec, ok := c.templates[name]
	if !ok {
		b, ok := store.Fallback(store.KindTemplate, name)
		if !ok {
			return nil, fmt.Errorf("proxy: template %q: %w", name, errNoTemplate)
		}
		if _, logged := c.fallbacks.LoadOrStore(name, struct{}{}); !logged {
			d.log.Warn("template not in the DB; using the copy embedded in the binary until it is added", "template", name)
		}
		rec = b
		rec.Version = 0
	}
	key := name + "@" + strconv.Itoa(rec.Version)
	if t, ok := d.cache.Get(key); ok {
		return t, nil
	}
	text := gjson.GetBytes(rec.Body, "text")
	if text.Type != gjson.String {
		return nil, fmt.Errorf("proxy: template %q@%d: body has no string \"text\"", name, rec.Version)
	}
	t := assembly.ParseTemplate(name, rec.Version, text.String())
	d.cache.Set(key, t, int64(len(text.Raw))+256)
	return t, nil
}

// Versions lists the active definitions of the current snapshot (for the info metric).
func (d *Definitions) Versions() []metrics.Version {
	c := d.snapshot()
	out := make([]metrics.Version, 0, len(c.templates)+len(c.protocols))
	for name, r := range c.templates {
		out = append(out, metrics.Version{Kind: "template", Name: name, Version: r.Version})
	}
	for id, p := range c.protocols {
		out = append(out, metrics.Version{Kind: "protocol", Name: id, Version: p.Version})
	}
	return out
}
