package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/promptgate/promptgate/store/boltfile"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/promptgate/promptgate/store/builtin"
)

// bbolt layout (schema 1). Version numbers and sequence keys are 8-byte big-endian uint64, so that
// bbolt's byte order is numeric order.
//
//	meta/
//	  schema                     "1"
//	  createdAt                  RFC 3339 time the file was initialised
//	templates/ and protocols/    one bucket per kind
//	  NAME/                      one bucket per name
//	    active                   version (absent = no active version)
//	    history                  activation stack: versions, 8 bytes each, most recent last
//	    shadow                   version in shadow (protocols only; absent = none)
//	    versions/  VERSION -> body, byte for byte as given (never rewritten)
//	    info/      VERSION -> JSON {"createdAt","author","note"}
//	rollouts/    SEQ -> JSON AppliedRollout, in the order applied
//	rolloutIDs/  ID  -> SEQ
const (
	bucketMeta       = "meta"
	bucketRollouts   = "rollouts"
	bucketRolloutIDs = "rolloutIDs"
	bucketVersions   = "versions"
	bucketInfo       = "info"
	keySchema        = "schema"
	keyCreatedAt     = "createdAt"
	keyActive        = "active"
	keyHistory       = "history"
	keyShadow        = "shadow"
)

const (
	// SchemaVersion is the layout version this package writes and reads.
	SchemaVersion = 1
	// DefaultLockTimeout is how long Open waits for the file lock when Options.LockTimeout is zero.
	DefaultLockTimeout = time.Second
	// MaxHistory is how many earlier activations each name remembers for Rollback; older ones are
	// dropped.
	MaxHistory = 256

	// BuiltinAuthor is the Author of seeded versions and of Fallback records.
	BuiltinAuthor = "builtin"
	seedNote      = "seeded from the binary"
	// RolloutAuthor is the Author of versions stored by ApplyRollout; their Note is the rollout id.
	RolloutAuthor = "migrate"
)

// Options configure Open.
type Options struct {
	// Logger receives one line per change (never a body). Nil discards.
	Logger *slog.Logger
	// Validate, if not nil, is called for every body before it is stored (AddVersion, ApplyRollout,
	// seeding a new file), after the structural checks passed and outside any transaction. A
	// non-nil error refuses the body and nothing is stored. It must not modify body.
	Validate func(kind Kind, name string, body []byte) error
	// Links, if not nil, checks how the definitions that a change leaves active refer to each other
	// (see LinksFunc). It runs inside the change's write transaction: a refused change stores
	// nothing.
	Links LinksFunc
	// LockTimeout is how long Open waits for the file lock; zero or negative means
	// DefaultLockTimeout. On timeout Open returns an error wrapping ErrLocked that names the file.
	LockTimeout time.Duration
	// ReadOnly opens the file with a shared lock; every change returns an error. The file must
	// exist and be initialised (it is not seeded).
	ReadOnly bool
}

// Bolt is the Store backed by one bbolt file. Create it with Open.
type Bolt struct {
	db       *bolt.DB
	path     string
	log      *slog.Logger
	validate func(Kind, string, []byte) error
	links    LinksFunc

	watchers Watchers
}

var _ Store = (*Bolt)(nil)

// Open opens (or creates) the bbolt file at path. A new file is seeded, in one transaction, with
// every built-in template and protocol as version 1 (Author "builtin"), each activated. An existing
// file is never reseeded, even when it lacks a built-in name.
func Open(path string, opts Options) (*Bolt, error) {
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	db, err := boltfile.Open(path, &bolt.Options{Timeout: timeout, ReadOnly: opts.ReadOnly})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("store: open %s: %w: waited %s; another process (for example a running `promptgate serve`) holds it: stop it, or use the admin API (--admin)", path, ErrLocked, timeout)
	}
	if ce := (*boltfile.CorruptError)(nil); errors.As(err, &ce) {
		err = fmt.Errorf("%w (%s)", ErrCorrupt, ce.Detail)
	}
	if errors.Is(err, ErrCorrupt) {
		return nil, fmt.Errorf("store: open %s: %w; restore the file from a backup, or move it away to start with the built-in definitions", path, err)
	}
	if errors.Is(err, fs.ErrPermission) {
		return nil, fmt.Errorf("store: open %s: %w; the promptgate user must be able to read and write the file and create files in its directory: fix the permissions or choose another --db", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	s := &Bolt{
		db:       db,
		path:     path,
		log:      opts.Logger,
		validate: opts.Validate,
		links:    opts.Links,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.init(opts.ReadOnly); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return s, nil
}

// ErrCorrupt: the database file is damaged (its pages fail bbolt's consistency check).
var ErrCorrupt = errors.New("database file is corrupt")

// Path returns the file the store was opened from.
func (s *Bolt) Path() string { return s.path }

// init checks the schema and, for a new file, seeds it.
func (s *Bolt) init(readOnly bool) error {
	var schema []byte
	if err := s.db.View(func(tx *bolt.Tx) error {
		if m := tx.Bucket([]byte(bucketMeta)); m != nil {
			schema = bytes.Clone(m.Get([]byte(keySchema)))
		}
		return nil
	}); err != nil {
		return err
	}
	if schema != nil {
		v, err := strconv.Atoi(string(schema))
		if err != nil || v < 1 {
			return fmt.Errorf("schema version %q is not valid; is this a promptgate database?", schema)
		}
		if v > SchemaVersion {
			return fmt.Errorf("schema version %d is newer than this binary supports (%d); upgrade promptgate", v, SchemaVersion)
		}
		return nil
	}
	if readOnly {
		return errors.New("the file is not initialised (no schema version); open it once without read-only to create and seed it")
	}

	type seed struct {
		kind Kind
		def  builtin.Definition
	}
	var seeds []seed
	for _, d := range builtin.Templates() {
		seeds = append(seeds, seed{KindTemplate, d})
	}
	for _, d := range builtin.Protocols() {
		seeds = append(seeds, seed{KindProtocol, d})
	}
	for _, sd := range seeds {
		name, err := s.check(sd.kind, sd.def.Body)
		if err != nil {
			return fmt.Errorf("seed built-in %s: %w", sd.def.File, err)
		}
		if name != sd.def.Name {
			return fmt.Errorf("built-in %s: %w: carries name %q, want %q", sd.def.File, ErrInvalid, name, sd.def.Name)
		}
	}
	now := time.Now().UTC()
	seeded := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists([]byte(bucketMeta))
		if err != nil {
			return err
		}
		if meta.Get([]byte(keySchema)) != nil {
			return nil // cannot happen while we hold the exclusive lock; never reseed regardless
		}
		for _, name := range [][]byte{[]byte(KindTemplate), []byte(KindProtocol), []byte(bucketRollouts), []byte(bucketRolloutIDs)} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		for _, sd := range seeds {
			nb, err := nameBucket(tx, sd.kind, sd.def.Name, true)
			if err != nil {
				return err
			}
			if cur := nb.Sequence(); cur != 0 {
				continue // the file had data without a schema key: keep it
			}
			v, err := putVersion(nb, bytes.Clone(sd.def.Body), BuiltinAuthor, seedNote, now)
			if err != nil {
				return err
			}
			if err := moveActive(nb, v); err != nil {
				return err
			}
		}
		if err := meta.Put([]byte(keyCreatedAt), []byte(now.Format(time.RFC3339Nano))); err != nil {
			return err
		}
		seeded = true
		return meta.Put([]byte(keySchema), []byte(strconv.Itoa(SchemaVersion)))
	})
	if err != nil {
		return fmt.Errorf("initialise: %w", err)
	}
	if seeded {
		s.log.Info("store: new database seeded with the built-in definitions", "path", s.path, "definitions", len(seeds))
	}
	return nil
}

// check runs the structural checks and the Validate hook, and returns the body's name (or what
// could be read of it) and an error wrapping ErrInvalid, without prefix.
func (s *Bolt) check(kind Kind, body []byte) (string, error) {
	name, err := checkBody(kind, body)
	if err != nil {
		return name, err
	}
	if s.validate != nil {
		if err := s.validate(kind, name, body); err != nil {
			return name, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	return name, nil
}

// Active implements Store.
func (s *Bolt) Active(ctx context.Context, kind Kind, name string) (Record, error) {
	var rec Record
	err := s.viewName(ctx, kind, name, func(nb *bolt.Bucket) (err error) {
		v := activeOf(nb)
		if v == 0 {
			return fmt.Errorf("%s/%s: no active version: %w", kind, name, ErrNotFound)
		}
		rec, err = readRecord(nb, kind, name, v)
		return err
	})
	if err != nil {
		return Record{}, err
	}
	return rec, nil
}

// Get implements Store.
func (s *Bolt) Get(ctx context.Context, kind Kind, name string, version int) (Record, error) {
	var rec Record
	err := s.viewName(ctx, kind, name, func(nb *bolt.Bucket) (err error) {
		rec, err = readRecord(nb, kind, name, version)
		return err
	})
	if err != nil {
		return Record{}, err
	}
	return rec, nil
}

// viewName runs fn on the bucket of kind/name in a read transaction. An error of precheck comes
// back as it is, any other prefixed "store: ".
func (s *Bolt) viewName(ctx context.Context, kind Kind, name string, fn func(nb *bolt.Bucket) error) error {
	if err := precheck(ctx, kind); err != nil {
		return err
	}
	err := s.db.View(func(tx *bolt.Tx) error {
		nb, err := nameBucket(tx, kind, name, false)
		if err != nil {
			return err
		}
		return fn(nb)
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// List implements Store.
func (s *Bolt) List(ctx context.Context, kind Kind) ([]Entry, error) {
	if err := precheck(ctx, kind); err != nil {
		return nil, err
	}
	var out []Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		kb := tx.Bucket([]byte(kind))
		if kb == nil {
			return nil
		}
		return kb.ForEachBucket(func(k []byte) error {
			e, err := readEntry(kb.Bucket(k), string(k))
			if err != nil {
				return fmt.Errorf("%s/%s: %w", kind, k, err)
			}
			out = append(out, e)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", kind, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name }) // bbolt order already; be explicit
	if out == nil {
		out = []Entry{}
	}
	return out, nil
}

// Entry implements Store.
func (s *Bolt) Entry(ctx context.Context, kind Kind, name string) (Entry, error) {
	var e Entry
	err := s.viewName(ctx, kind, name, func(nb *bolt.Bucket) (err error) {
		if e, err = readEntry(nb, name); err != nil {
			return fmt.Errorf("%s/%s: %w", kind, name, err)
		}
		return nil
	})
	if err != nil {
		return Entry{}, err
	}
	return e, nil
}

// AddVersion implements Store.
func (s *Bolt) AddVersion(ctx context.Context, kind Kind, body []byte, author, note string) (int, error) {
	if err := precheck(ctx, kind); err != nil {
		return 0, err
	}
	name, err := s.check(kind, body)
	if err != nil {
		return 0, fmt.Errorf("store: %s: %w", label(kind, name), err)
	}
	body = bytes.Clone(body) // bbolt needs the value to stay put until commit; the caller may reuse theirs
	var v int
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := s.checkLinks(tx, map[string][]byte{Key(kind, name): body}); err != nil {
			return err
		}
		nb, err := nameBucket(tx, kind, name, true)
		if err != nil {
			return err
		}
		v, err = putVersion(nb, body, author, note, time.Now().UTC())
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: add version of %s/%s: %w", kind, name, err)
	}
	s.log.Info("store: version added", "kind", kind, "name", name, "version", v, "author", author)
	s.notify()
	return v, nil
}

// Activate implements Store.
func (s *Bolt) Activate(ctx context.Context, kind Kind, name string, version int) (int, error) {
	return s.activate(ctx, kind, name, version, -1)
}

// ActivateIf implements Store.
func (s *Bolt) ActivateIf(ctx context.Context, kind Kind, name string, version, expected int) error {
	_, err := s.activate(ctx, kind, name, version, max(expected, 0))
	return err
}

// activate moves the active pointer of kind/name to version, where expected is negative or the
// active one.
func (s *Bolt) activate(ctx context.Context, kind Kind, name string, version, expected int) (int, error) {
	if err := precheck(ctx, kind); err != nil {
		return 0, err
	}
	var prev int
	changed := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		nb, err := nameBucket(tx, kind, name, false)
		if err != nil {
			return err
		}
		if !hasVersion(nb, version) {
			return fmt.Errorf("%s/%s@%d: %w", kind, name, version, ErrNotFound)
		}
		prev = activeOf(nb)
		if expected >= 0 && prev != expected {
			return fmt.Errorf("%s/%s: version %d is active, not %d: %w", kind, name, prev, expected, ErrConflict)
		}
		if prev == version {
			return nil
		}
		changed = true
		if err := moveActive(nb, version); err != nil {
			return err
		}
		return s.checkLinks(tx, nil, Key(kind, name))
	})
	if err != nil {
		return 0, fmt.Errorf("store: activate: %w", err)
	}
	if changed {
		s.log.Info("store: version activated", "kind", kind, "name", name, "version", version, "previous", prev)
		s.notify()
	}
	return prev, nil
}

// Rollback implements Store.
func (s *Bolt) Rollback(ctx context.Context, kind Kind, name string) (int, int, error) {
	if err := precheck(ctx, kind); err != nil {
		return 0, 0, err
	}
	var prev, to int
	err := s.db.Update(func(tx *bolt.Tx) error {
		nb, err := nameBucket(tx, kind, name, false)
		if err != nil {
			return err
		}
		prev = activeOf(nb)
		hist := historyOf(nb)
		// Drop entries equal to the current version (possible after the name had no active
		// version and was then activated again at the version it had before).
		for len(hist) > 0 && hist[len(hist)-1] == prev {
			hist = hist[:len(hist)-1]
		}
		if len(hist) == 0 {
			return fmt.Errorf("%s/%s: from version %d: %w", kind, name, prev, ErrNoPreviousVersion)
		}
		to = hist[len(hist)-1]
		if err := setHistory(nb, hist[:len(hist)-1]); err != nil {
			return err
		}
		if err := setActive(nb, to); err != nil {
			return err
		}
		return s.checkLinks(tx, nil, Key(kind, name))
	})
	if err != nil {
		return 0, 0, fmt.Errorf("store: rollback: %w", err)
	}
	s.log.Info("store: rolled back", "kind", kind, "name", name, "version", to, "from", prev)
	s.notify()
	return to, prev, nil
}

// Snapshot implements Store.
func (s *Bolt) Snapshot(ctx context.Context) (Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return Snapshot{}, fmt.Errorf("store: %w", err)
	}
	var snap Snapshot
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		if snap, err = readActive(tx); err != nil {
			return err
		}
		snap.Tools = map[string]ToolOverride{}
		if tb := tx.Bucket([]byte(bucketTools)); tb != nil {
			if err := tb.ForEach(func(k, v []byte) error {
				var o ToolOverride
				if err := json.Unmarshal(v, &o); err != nil {
					return fmt.Errorf("tool override %q: %w", k, err)
				}
				snap.Tools[string(k)] = o
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("store: snapshot: %w", err)
	}
	return snap, nil
}

// readActive reads every active record of tx (Tools is left nil).
func readActive(tx *bolt.Tx) (Snapshot, error) {
	snap := NewSnapshot()
	snap.Tools = nil
	for _, kind := range Kinds() {
		kb := tx.Bucket([]byte(kind))
		if kb == nil {
			continue
		}
		m := snap.Of(kind)
		err := kb.ForEachBucket(func(k []byte) error {
			nb := kb.Bucket(k)
			if sv := shadowOf(nb); sv != 0 && kind == KindProtocol {
				rec, err := readRecord(nb, kind, string(k), sv)
				if err != nil {
					return err
				}
				snap.Shadows[rec.Name] = rec
			}
			v := activeOf(nb)
			if v == 0 {
				return nil
			}
			rec, err := readRecord(nb, kind, string(k), v)
			if err != nil {
				return err
			}
			m[rec.Name] = rec
			return nil
		})
		if err != nil {
			return Snapshot{}, err
		}
	}
	return snap, nil
}

// checkLinks runs the Links hook on what tx leaves active, with the bodies of proposed ("KIND/NAME"
// → body) taken as active too; changed and the keys of proposed are what the change touches.
func (s *Bolt) checkLinks(tx *bolt.Tx, proposed map[string][]byte, changed ...string) error {
	if s.links == nil {
		return nil
	}
	snap, err := readActive(tx)
	if err != nil {
		return err
	}
	return s.links.Check(snap, proposed, changed)
}

// rolloutItem is one definition of a rollout, checked.
type rolloutItem struct {
	kind Kind
	name string
	body []byte
}

// checkRollout runs every check on r and returns its definitions in the order they are applied
// (templates, then protocols). check is the per-body check (structural only, or with the hook).
func checkRollout(r Rollout, check func(Kind, []byte) (string, error)) ([]rolloutItem, error) {
	if err := checkRolloutID(r.ID); err != nil {
		return nil, err
	}
	if len(r.Templates)+len(r.Protocols) == 0 {
		return nil, fmt.Errorf("%w: no templates and no protocols", ErrInvalid)
	}
	var items []rolloutItem
	seen := map[string]int{}
	for _, group := range []struct {
		kind  Kind
		bodys []json.RawMessage
	}{{KindTemplate, r.Templates}, {KindProtocol, r.Protocols}} {
		for i, body := range group.bodys {
			name, err := check(group.kind, body)
			if err != nil {
				if name != "" {
					return nil, fmt.Errorf("%s[%d] (%s): %w", group.kind, i, name, err)
				}
				return nil, fmt.Errorf("%s[%d]: %w", group.kind, i, err)
			}
			if j, dup := seen[Key(group.kind, name)]; dup {
				return nil, fmt.Errorf("%w: %s[%d] and %s[%d] both define %q", ErrInvalid, group.kind, j, group.kind, i, name)
			}
			seen[Key(group.kind, name)] = i
			items = append(items, rolloutItem{group.kind, name, bytes.Clone(body)})
		}
	}
	return items, nil
}

// ApplyRollout implements Store.
func (s *Bolt) ApplyRollout(ctx context.Context, r Rollout) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	items, err := checkRollout(r, s.check)
	if err != nil {
		return fmt.Errorf("store: rollout %q: %w", r.ID, err)
	}
	now := time.Now().UTC()
	applied := AppliedRollout{ID: r.ID, AppliedAt: now, Previous: map[string]int{}, Activated: map[string]int{}}
	err = s.db.Update(func(tx *bolt.Tx) error {
		ids := tx.Bucket([]byte(bucketRolloutIDs))
		rb := tx.Bucket([]byte(bucketRollouts))
		if ids == nil || rb == nil {
			return errors.New("rollout buckets are missing")
		}
		if ids.Get([]byte(r.ID)) != nil {
			return ErrAlreadyApplied
		}
		for _, it := range items {
			nb, err := nameBucket(tx, it.kind, it.name, true)
			if err != nil {
				return err
			}
			prev := activeOf(nb)
			v, err := putVersion(nb, it.body, RolloutAuthor, r.ID, now)
			if err != nil {
				return fmt.Errorf("%s/%s: %w", it.kind, it.name, err)
			}
			if err := moveActive(nb, v); err != nil {
				return fmt.Errorf("%s/%s: %w", it.kind, it.name, err)
			}
			applied.Previous[Key(it.kind, it.name)] = prev
			applied.Activated[Key(it.kind, it.name)] = v
		}
		if err := s.checkLinks(tx, nil, slices.Sorted(maps.Keys(applied.Activated))...); err != nil {
			return err
		}
		seq, err := rb.NextSequence()
		if err != nil {
			return err
		}
		rec, err := json.Marshal(applied)
		if err != nil {
			return err
		}
		if err := rb.Put(u64(seq), rec); err != nil {
			return err
		}
		return ids.Put([]byte(r.ID), u64(seq))
	})
	if err != nil {
		return fmt.Errorf("store: rollout %q: %w", r.ID, err)
	}
	s.log.Info("store: rollout applied", "id", r.ID, "activated", applied.Activated)
	s.notify()
	return nil
}

// RevertLast implements Store.
func (s *Bolt) RevertLast(ctx context.Context) (AppliedRollout, error) {
	if err := ctx.Err(); err != nil {
		return AppliedRollout{}, fmt.Errorf("store: %w", err)
	}
	var (
		ar    AppliedRollout
		moved []string // names whose active version was changed after the rollout, by hand
	)
	err := s.db.Update(func(tx *bolt.Tx) error {
		ids := tx.Bucket([]byte(bucketRolloutIDs))
		rb := tx.Bucket([]byte(bucketRollouts))
		if ids == nil || rb == nil {
			return errors.New("rollout buckets are missing")
		}
		k, v := rb.Cursor().Last()
		if k == nil {
			return ErrNothingToRevert
		}
		if err := json.Unmarshal(v, &ar); err != nil {
			return fmt.Errorf("decode applied rollout %d: %w", binary.BigEndian.Uint64(k), err)
		}
		keys := make([]string, 0, len(ar.Previous))
		for key := range ar.Previous {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			kindName, name, ok := strings.Cut(key, "/")
			kind := Kind(kindName)
			if !ok || !kind.Valid() {
				return fmt.Errorf("applied rollout %q: bad key %q", ar.ID, key)
			}
			nb, err := nameBucket(tx, kind, name, false)
			if err != nil {
				return err
			}
			prev, activated := ar.Previous[key], ar.Activated[key]
			if prev != 0 && !hasVersion(nb, prev) {
				return fmt.Errorf("%s: version %d to re-activate: %w", key, prev, ErrNotFound)
			}
			cur := activeOf(nb)
			hist := historyOf(nb)
			if cur == activated && (prev == 0 || (len(hist) > 0 && hist[len(hist)-1] == prev)) {
				// Nothing moved since the rollout: undo its activation, history included.
				if prev != 0 {
					hist = hist[:len(hist)-1]
				}
				if err := setHistory(nb, hist); err != nil {
					return err
				}
				if err := setActive(nb, prev); err != nil {
					return err
				}
				continue
			}
			// Someone activated another version since: still restore exactly Previous, as a new
			// activation, so that Rollback can return to what they had chosen.
			moved = append(moved, key)
			if err := moveActive(nb, prev); err != nil {
				return err
			}
		}
		if err := s.checkLinks(tx, nil, keys...); err != nil {
			return err
		}
		if err := rb.Delete(k); err != nil {
			return err
		}
		return ids.Delete([]byte(ar.ID))
	})
	if err != nil {
		return AppliedRollout{}, fmt.Errorf("store: revert last rollout: %w", err)
	}
	if len(moved) > 0 {
		s.log.Warn("store: reverted rollout had been changed by hand since; restored its previous versions anyway", "id", ar.ID, "names", moved)
	}
	s.log.Info("store: rollout reverted", "id", ar.ID, "restored", ar.Previous)
	s.notify()
	return ar, nil
}

// Rollouts implements Store.
func (s *Bolt) Rollouts(ctx context.Context) ([]AppliedRollout, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	out := []AppliedRollout{}
	err := s.db.View(func(tx *bolt.Tx) error {
		rb := tx.Bucket([]byte(bucketRollouts))
		if rb == nil {
			return nil
		}
		return rb.ForEach(func(k, v []byte) error {
			var ar AppliedRollout
			if err := json.Unmarshal(v, &ar); err != nil {
				return fmt.Errorf("decode applied rollout %d: %w", binary.BigEndian.Uint64(k), err)
			}
			out = append(out, ar)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: rollouts: %w", err)
	}
	return out, nil
}

// Watch implements Store. fn is called on the goroutine that committed the change, after the commit
// and before the changing method returns, outside every lock of the store: so when Activate
// returns, every watcher has seen the change. Concurrent changes may call fn concurrently.
func (s *Bolt) Watch(fn func()) (cancel func()) { return s.watchers.Add(fn) }

func (s *Bolt) notify() { s.watchers.Notify() }

// Close implements Store.
func (s *Bolt) Close() error {
	s.watchers.Clear()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("store: close %s: %w", s.path, err)
	}
	return nil
}

// --- helpers; every one runs inside a transaction and copies what it returns ---

func precheck(ctx context.Context, kind Kind) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if !kind.Valid() {
		return UnknownKind(kind)
	}
	return nil
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

func versionKey(v int) []byte { return u64(uint64(v)) }

// nameBucket returns the bucket of kind/name, creating it (and the kind bucket) if create is set.
// A missing name is ErrNotFound.
func nameBucket(tx *bolt.Tx, kind Kind, name string, create bool) (*bolt.Bucket, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("%s/%q: invalid name: %w", kind, name, ErrNotFound)
	}
	if create {
		kb, err := tx.CreateBucketIfNotExists([]byte(kind))
		if err != nil {
			return nil, err
		}
		nb, err := kb.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return nil, err
		}
		for _, sub := range [][]byte{[]byte(bucketVersions), []byte(bucketInfo)} {
			if _, err := nb.CreateBucketIfNotExists(sub); err != nil {
				return nil, err
			}
		}
		return nb, nil
	}
	kb := tx.Bucket([]byte(kind))
	if kb == nil {
		return nil, fmt.Errorf("%s/%s: %w", kind, name, ErrNotFound)
	}
	nb := kb.Bucket([]byte(name))
	if nb == nil {
		return nil, fmt.Errorf("%s/%s: %w", kind, name, ErrNotFound)
	}
	return nb, nil
}

// putVersion stores body as the next version of nb. body must not be modified until the tx ends.
// The name bucket's sequence is the last version number, so numbers only increase.
func putVersion(nb *bolt.Bucket, body []byte, author, note string, at time.Time) (int, error) {
	seq, err := nb.NextSequence()
	if err != nil {
		return 0, err
	}
	info, err := json.Marshal(VersionInfo{Version: int(seq), CreatedAt: at, Author: author, Note: note})
	if err != nil {
		return 0, err
	}
	key := u64(seq)
	if err := nb.Bucket([]byte(bucketVersions)).Put(key, body); err != nil {
		return 0, err
	}
	if err := nb.Bucket([]byte(bucketInfo)).Put(key, info); err != nil {
		return 0, err
	}
	return int(seq), nil
}

func hasVersion(nb *bolt.Bucket, v int) bool {
	if v < 1 {
		return false
	}
	vb := nb.Bucket([]byte(bucketVersions))
	return vb != nil && vb.Get(versionKey(v)) != nil
}

func activeOf(nb *bolt.Bucket) int {
	b := nb.Get([]byte(keyActive))
	if len(b) != 8 {
		return 0
	}
	return int(binary.BigEndian.Uint64(b))
}

// setActive makes v (0 = none) the active version; the version in shadow, when it is v, leaves the
// shadow.
func setActive(nb *bolt.Bucket, v int) error {
	if v == 0 {
		return nb.Delete([]byte(keyActive))
	}
	if shadowOf(nb) == v {
		if err := nb.Delete([]byte(keyShadow)); err != nil {
			return err
		}
	}
	return nb.Put([]byte(keyActive), versionKey(v))
}

func shadowOf(nb *bolt.Bucket) int {
	b := nb.Get([]byte(keyShadow))
	if len(b) != 8 {
		return 0
	}
	return int(binary.BigEndian.Uint64(b))
}

func historyOf(nb *bolt.Bucket) []int {
	b := nb.Get([]byte(keyHistory))
	out := make([]int, 0, len(b)/8+1)
	for len(b) >= 8 {
		out = append(out, int(binary.BigEndian.Uint64(b[:8])))
		b = b[8:]
	}
	return out
}

func setHistory(nb *bolt.Bucket, hist []int) error {
	if len(hist) > MaxHistory {
		hist = hist[len(hist)-MaxHistory:]
	}
	if len(hist) == 0 {
		return nb.Delete([]byte(keyHistory))
	}
	b := make([]byte, 0, 8*len(hist))
	for _, v := range hist {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return nb.Put([]byte(keyHistory), b)
}

// moveActive makes v (0 = none) the active version, pushing the current one on the history.
func moveActive(nb *bolt.Bucket, v int) error {
	cur := activeOf(nb)
	if cur == v {
		return nil
	}
	if cur != 0 {
		if err := setHistory(nb, append(historyOf(nb), cur)); err != nil {
			return err
		}
	}
	return setActive(nb, v)
}

func readInfo(nb *bolt.Bucket, v int) (VersionInfo, error) {
	var info VersionInfo
	ib := nb.Bucket([]byte(bucketInfo))
	if ib == nil {
		return info, fmt.Errorf("version %d: info bucket missing", v)
	}
	raw := ib.Get(versionKey(v))
	if raw == nil {
		return info, fmt.Errorf("version %d: info missing", v)
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		return info, fmt.Errorf("version %d: decode info: %w", v, err)
	}
	info.Version = v
	return info, nil
}

func readRecord(nb *bolt.Bucket, kind Kind, name string, v int) (Record, error) {
	if !hasVersion(nb, v) {
		return Record{}, fmt.Errorf("%s/%s@%d: %w", kind, name, v, ErrNotFound)
	}
	info, err := readInfo(nb, v)
	if err != nil {
		return Record{}, fmt.Errorf("%s/%s: %w", kind, name, err)
	}
	return Record{
		Kind:      kind,
		Name:      name,
		Version:   v,
		CreatedAt: info.CreatedAt,
		Author:    info.Author,
		Note:      info.Note,
		Body:      bytes.Clone(nb.Bucket([]byte(bucketVersions)).Get(versionKey(v))), // bbolt memory is only valid in the tx
	}, nil
}

func readEntry(nb *bolt.Bucket, name string) (Entry, error) {
	e := Entry{Name: name, Active: activeOf(nb), Shadow: shadowOf(nb), Versions: []VersionInfo{}}
	e.RollbackTo = RollbackTarget(e.Active, historyOf(nb))
	ib := nb.Bucket([]byte(bucketInfo))
	if ib == nil {
		return e, nil
	}
	err := ib.ForEach(func(k, _ []byte) error {
		info, err := readInfo(nb, int(binary.BigEndian.Uint64(k)))
		if err != nil {
			return err
		}
		e.Versions = append(e.Versions, info)
		return nil
	})
	return e, err
}

// SetShadow implements Store.
func (s *Bolt) SetShadow(ctx context.Context, name string, version int) (int, error) {
	if err := precheck(ctx, KindProtocol); err != nil {
		return 0, err
	}
	var prev int
	err := s.db.Update(func(tx *bolt.Tx) error {
		nb, err := nameBucket(tx, KindProtocol, name, false)
		if err != nil {
			return err
		}
		prev = shadowOf(nb)
		if err := CheckShadow(KindProtocol, name, version, prev, activeOf(nb), hasVersion(nb, version)); err != nil {
			return err
		}
		if version == 0 {
			return nb.Delete([]byte(keyShadow))
		}
		return nb.Put([]byte(keyShadow), versionKey(version))
	})
	if err != nil {
		return 0, fmt.Errorf("store: shadow: %w", err)
	}
	if prev != version {
		s.log.Info("store: shadow set", "kind", KindProtocol, "name", name, "version", version, "previous", prev)
		s.notify()
	}
	return prev, nil
}

// bucketTools holds the runtime enablement overrides: tool name -> ToolOverride JSON.
const bucketTools = "tools"

// SetToolEnabled implements Store.
func (s *Bolt) SetToolEnabled(ctx context.Context, name string, enabled bool, author string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if name == "" || len(name) > 256 {
		return fmt.Errorf("store: tool name %q: %w: 1 to 256 bytes", name, ErrInvalid)
	}
	v, err := json.Marshal(ToolOverride{Enabled: enabled, Author: author, UpdatedAt: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucketTools))
		if err != nil {
			return err
		}
		return b.Put([]byte(name), v)
	}); err != nil {
		return fmt.Errorf("store: tool %q: %w", name, err)
	}
	s.log.Info("store: tool enablement set", "tool", name, "enabled", enabled, "author", author)
	s.notify()
	return nil
}

// ClearToolEnabled implements Store.
func (s *Bolt) ClearToolEnabled(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucketTools))
		if b == nil || b.Get([]byte(name)) == nil {
			return fmt.Errorf("tool override %q: %w", name, ErrNotFound)
		}
		return b.Delete([]byte(name))
	}); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s.log.Info("store: tool enablement cleared", "tool", name)
	s.notify()
	return nil
}
