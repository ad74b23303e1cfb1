// Package learn is promptgate's learn mode: for the tool calls of a protocol that runs in audit
// mode (or has a version in shadow), it keeps where each argument value came from — the sources it
// occurred in, as policy/flow reads them (user, app, context, list:NAME, tool:NAME and the field of
// its output, mcp:SERVER, or none) — what the scanners found in it (hosts, address domains, IBAN
// countries), how many calls of each tool a conversation made and which tools requests were
// offered, as counters per protocol and hour with the conversations they come from. It never keeps
// a value: no argument value, no message text, no conversation id (only a keyed digest of it).
// Suggest turns what was learned into a proposed protocol version.
//
// It owns the counters, their bounded file (Store) and the proposal. It does not decide when a
// request is learned from, read requests or answers (the proxy does), or store definitions
// (store/).
package learn

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/store/boltfile"
)

// Defaults and bounds of a Store.
const (
	// DefaultRetention is how long the hourly counters are kept.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultFlushEvery is how often what was learned is written to the file.
	DefaultFlushEvery = 5 * time.Second
	// DefaultQueue is how many calls may wait to be read; more are dropped (and counted).
	DefaultQueue = 4096
	// DefaultQueueBytes bounds the bytes the calls waiting to be read hold (their conversations);
	// past it they are dropped (and counted).
	DefaultQueueBytes = 64 << 20
	// lockTimeout is how long Open waits for the file lock.
	lockTimeout = time.Second

	maxTools    = 256 // tools per protocol and hour
	maxArgs     = 128 // argument paths per tool
	maxSets     = 64  // source sets per argument path
	maxItems    = 256 // items found per argument path
	maxConvs    = 256 // conversation digests per counter
	maxRequests = 3   // request ids per counter (the latest)
)

// Observation is one tool call of a request that is learned from.
type Observation struct {
	Protocol  string
	Tool      string
	RequestID string
	Time      time.Time
	// Conversation is the request's conversation as a flow.Policy's Learning reads it.
	Conversation *flow.Conversation
	// Args are the call's arguments (Observe copies them).
	Args []byte
	// Schema is the JSON Schema the client declared for the tool: only argument paths whose every
	// key it declares are kept (a key the model made up is never stored).
	Schema []byte
	// Declared are the names of the tools the request declared: a call of another tool is not
	// learned, and an output of another tool counts as tool:? (such a name is the model's text: it
	// may hold anything the conversation does).
	Declared []string
	// Nth is the call's number among the calls of its tool in the conversation (its history and the
	// answer so far), from 1.
	Nth int
	// Size is about how many bytes the observation holds while it waits (the request body its
	// conversation was read from), for the queue's bound.
	Size int
}

// Options configure Open.
type Options struct {
	// Retention is how long hourly counters are kept; 0 is DefaultRetention.
	Retention time.Duration
	// FlushEvery is how often the counters are written; 0 is DefaultFlushEvery.
	FlushEvery time.Duration
	// Queue bounds the calls waiting to be read; 0 is DefaultQueue.
	Queue int
	// QueueBytes bounds the bytes they hold (Observation.Size); 0 is DefaultQueueBytes.
	QueueBytes int64
	// ReadOnly opens an existing file to read it (the CLI while no serve holds it).
	ReadOnly bool
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	Log *slog.Logger
}

// Store learns from calls and keeps the counters in its own bbolt file. Observe and Offered never
// block: the work of reading a call happens on one goroutine of the Store's, and a full queue (in
// calls or in the bytes they hold) drops the call (and counts it). Create it with Open; Close it to
// write what is pending.
type Store struct {
	db   *bolt.DB
	path string
	o    Options
	key  []byte // keys the digests of conversation ids

	// inMu guards sending on in against Close closing it.
	inMu    sync.RWMutex
	in      chan job
	closed  bool
	done    chan struct{}
	dropped atomic.Uint64
	queued  atomic.Int64 // bytes the observations waiting hold
	once    sync.Once

	mu      sync.Mutex // pending
	pending map[recordKey]*Record
}

// job is one thing for the Store's goroutine: a call, a request's offered tools, or a flush to
// answer.
type job struct {
	obs     *Observation
	offered *offered
	flushed chan error
}

type offered struct {
	protocol string
	at       time.Time
	tools    []string
}

// recordKey is one protocol's hour.
type recordKey struct {
	protocol string
	hour     int64 // Unix hours
}

// bbolt layout: meta/key (the digest key, 32 random bytes); counters/PROTOCOL/HOUR (8-byte
// big-endian Unix hour) -> Record as JSON.
var (
	bucketMeta     = []byte("meta")
	bucketCounters = []byte("counters")
	keyDigest      = []byte("key")
)

// Open opens (or creates, mode 0600) the learn file at path.
func Open(path string, o Options) (*Store, error) {
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.FlushEvery <= 0 {
		o.FlushEvery = DefaultFlushEvery
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.QueueBytes <= 0 {
		o.QueueBytes = DefaultQueueBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	db, err := boltfile.Open(path, &bolt.Options{Timeout: lockTimeout, ReadOnly: o.ReadOnly})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("learn: open %s: the file is locked by another process (a running promptgate serve?): ask its admin API instead (--admin)", path)
	case errors.Is(err, boltfile.ErrCorrupt):
		return nil, fmt.Errorf("learn: open %s: the file is damaged: %v; move it away (learning starts again)", path, err)
	case err != nil:
		return nil, fmt.Errorf("learn: open %s: %w", path, err)
	}
	s := &Store{db: db, path: path, o: o, pending: map[recordKey]*Record{}, done: make(chan struct{})}
	if err := s.init(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("learn: open %s: %w", path, err)
	}
	if o.ReadOnly {
		close(s.done)
		return s, nil
	}
	s.in = make(chan job, o.Queue)
	go s.run()
	return s, nil
}

// init reads the digest key, making it on a new file.
func (s *Store) init() error {
	if s.o.ReadOnly {
		return s.db.View(func(tx *bolt.Tx) error {
			if m := tx.Bucket(bucketMeta); m != nil {
				s.key = slices.Clone(m.Get(keyDigest))
			}
			return nil
		})
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		m, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketCounters); err != nil {
			return err
		}
		if k := m.Get(keyDigest); len(k) == 32 {
			s.key = slices.Clone(k)
			return nil
		}
		s.key = make([]byte, 32)
		if _, err := rand.Read(s.key); err != nil {
			return err
		}
		return m.Put(keyDigest, slices.Clone(s.key))
	})
}

// Path is the Store's file.
func (s *Store) Path() string { return s.path }

// Dropped is how many calls were dropped because the queue was full.
func (s *Store) Dropped() uint64 { return s.dropped.Load() }

// Observe queues a call to be learned from and returns at once.
func (s *Store) Observe(o Observation) {
	if s == nil || s.in == nil {
		return
	}
	o.Args = slices.Clone(o.Args)
	if o.Time.IsZero() {
		o.Time = s.o.Now()
	}
	o.Size += len(o.Args)
	if s.queued.Add(int64(o.Size)) > s.o.QueueBytes {
		s.queued.Add(-int64(o.Size))
		s.dropped.Add(1)
		return
	}
	if !s.offer(job{obs: &o}) {
		s.queued.Add(-int64(o.Size))
	}
}

// Offered counts one request of protocol and the tools it kept (the tools it offered the model).
func (s *Store) Offered(protocol string, tools []string) {
	if s == nil || s.in == nil {
		return
	}
	s.offer(job{offered: &offered{protocol: protocol, at: s.o.Now(), tools: slices.Clone(tools)}})
}

// offer queues j without waiting; false when it was dropped.
func (s *Store) offer(j job) bool {
	s.inMu.RLock()
	defer s.inMu.RUnlock()
	if s.closed {
		return false
	}
	select {
	case s.in <- j:
		return true
	default:
		s.dropped.Add(1)
		return false
	}
}

// Flush waits until every call queued before it is read and written to the file.
func (s *Store) Flush(ctx context.Context) error {
	if s == nil || s.in == nil {
		return nil
	}
	ch := make(chan error, 1)
	s.inMu.RLock()
	if s.closed {
		s.inMu.RUnlock()
		return nil
	}
	select {
	case s.in <- job{flushed: ch}:
		s.inMu.RUnlock()
	case <-ctx.Done():
		s.inMu.RUnlock()
		return ctx.Err()
	}
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close writes what is pending and closes the file.
func (s *Store) Close() error {
	s.once.Do(func() {
		if s.in != nil {
			s.inMu.Lock()
			s.closed = true
			close(s.in)
			s.inMu.Unlock()
			<-s.done
		}
	})
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("learn: close %s: %w", s.path, err)
	}
	return nil
}

// run is the Store's goroutine: it reads the calls, and writes the counters every FlushEvery.
func (s *Store) run() {
	defer close(s.done)
	t := time.NewTicker(s.o.FlushEvery)
	defer t.Stop()
	for {
		select {
		case j, ok := <-s.in:
			if !ok {
				if err := s.write(); err != nil {
					s.o.Log.Error("learn: write the counters", "file", s.path, "err", err)
				}
				return
			}
			switch {
			case j.obs != nil:
				s.learn(j.obs)
				s.queued.Add(-int64(j.obs.Size))
			case j.offered != nil:
				s.record(j.offered.protocol, j.offered.at).offer(j.offered.tools)
			case j.flushed != nil:
				j.flushed <- s.write()
			}
		case <-t.C:
			if err := s.write(); err != nil {
				s.o.Log.Error("learn: write the counters", "file", s.path, "err", err)
			}
		}
	}
}

// record is the pending record of protocol's hour at t.
func (s *Store) record(protocol string, t time.Time) *Record {
	k := recordKey{protocol, t.Unix() / 3600}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.pending[k]
	if r == nil {
		r = &Record{}
		s.pending[k] = r
	}
	return r
}

// learn reads one call into its hour's record.
func (s *Store) learn(o *Observation) {
	if !slices.Contains(o.Declared, o.Tool) {
		return
	}
	conv := s.digest(o.Conversation)
	r := s.record(o.Protocol, o.Time)
	t := r.tool(o.Tool)
	if t == nil {
		return
	}
	t.count(conv, o.RequestID)
	t.MaxPerConversation = max(t.MaxPerConversation, o.Nth)
	if o.Conversation == nil {
		return
	}
	for _, or := range o.Conversation.Origins(o.Args) {
		if !Declared(o.Schema, or.Path) {
			t.Undeclared++
			continue
		}
		a := t.arg(or.Path)
		if a == nil {
			continue
		}
		a.count(conv, o.RequestID)
		if or.Kind != "" {
			a.Kinds = addCount(a.Kinds, or.Kind)
		}
		a.set(setKey(declaredSources(or.Sources, o.Declared))).count(conv, o.RequestID)
		for _, f := range or.Items {
			if c := a.item(f.Kind + ":" + f.Name); c != nil {
				c.count(conv, o.RequestID)
			}
		}
	}
}

// digest is the keyed digest of a conversation's key, 53 bits (exact as a JSON number in every
// reader); 0 when the conversation cannot be told apart.
func (s *Store) digest(c *flow.Conversation) uint64 {
	if c == nil || c.Key() == "" {
		return 0
	}
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(c.Key()))
	return binary.BigEndian.Uint64(m.Sum(nil)[:8])>>11 | 1
}

// write merges the pending records into the file and drops the hours past the retention, in one
// transaction.
func (s *Store) write() error {
	s.mu.Lock()
	pending := s.pending
	s.pending = map[recordKey]*Record{}
	s.mu.Unlock()
	oldest := s.o.Now().Add(-s.o.Retention).Unix() / 3600
	return s.db.Update(func(tx *bolt.Tx) error {
		cb, err := tx.CreateBucketIfNotExists(bucketCounters)
		if err != nil {
			return err
		}
		for k, r := range pending {
			pb, err := cb.CreateBucketIfNotExists([]byte(k.protocol))
			if err != nil {
				return err
			}
			hk := hourKey(k.hour)
			if old := pb.Get(hk); old != nil {
				var prev Record
				if err := json.Unmarshal(old, &prev); err != nil {
					return fmt.Errorf("counters %s/%d: %w", k.protocol, k.hour, err)
				}
				prev.merge(r)
				r = &prev
			}
			v, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if err := pb.Put(hk, v); err != nil {
				return err
			}
		}
		return cb.ForEachBucket(func(name []byte) error {
			pb := cb.Bucket(name)
			c := pb.Cursor()
			for k, _ := c.First(); k != nil && int64(binary.BigEndian.Uint64(k)) < oldest; k, _ = c.First() {
				if err := c.Delete(); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

func hourKey(h int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(h))
	return b[:]
}

// Window reads what was learned of protocol at or after since (hours that began before since count
// when they end after it), the pending counters written first.
func (s *Store) Window(ctx context.Context, protocol string, since time.Time) (Learned, error) {
	if err := s.Flush(ctx); err != nil {
		return Learned{}, fmt.Errorf("learn: %w", err)
	}
	now := s.o.Now()
	out := Record{}
	first := since.Unix() / 3600
	err := s.db.View(func(tx *bolt.Tx) error {
		cb := tx.Bucket(bucketCounters)
		if cb == nil {
			return nil
		}
		pb := cb.Bucket([]byte(protocol))
		if pb == nil {
			return nil
		}
		c := pb.Cursor()
		for k, v := c.Seek(hourKey(first)); k != nil; k, v = c.Next() {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("counters %s/%d: %w", protocol, binary.BigEndian.Uint64(k), err)
			}
			out.merge(&r)
		}
		return nil
	})
	if err != nil {
		return Learned{}, fmt.Errorf("learn: read %s: %w", s.path, err)
	}
	return out.learned(protocol, since, now), nil
}

// Protocols lists the protocols something was learned of, sorted.
func (s *Store) Protocols() ([]string, error) {
	out := []string{}
	err := s.db.View(func(tx *bolt.Tx) error {
		cb := tx.Bucket(bucketCounters)
		if cb == nil {
			return nil
		}
		return cb.ForEachBucket(func(k []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// Declared reports whether every key of an argument path (a gjson path as flow.Origin gives it) is
// a property the tool's schema declares: "properties" at each object step, "items" at each "#".
func Declared(schema []byte, path string) bool {
	if len(schema) == 0 || !gjson.ValidBytes(schema) {
		return false
	}
	cur := gjson.ParseBytes(schema)
	for _, step := range splitPath(path) {
		if step == "#" {
			cur = cur.Get("items")
		} else {
			props := cur.Get("properties")
			if !props.IsObject() {
				return false
			}
			found := gjson.Result{}
			props.ForEach(func(k, v gjson.Result) bool {
				if k.Str == step {
					found = v
					return false
				}
				return true
			})
			cur = found
		}
		if !cur.Exists() {
			return false
		}
	}
	return true
}

// splitPath splits a gjson path at its unescaped dots, the escapes removed.
func splitPath(path string) []string {
	var out []string
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '\\' && i+1 < len(path):
			i++
			b.WriteByte(path[i])
		case c == '.':
			out = append(out, b.String())
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	return append(out, b.String())
}

// declaredSources are the sources of a value with each output of a tool the request did not declare
// as tool:? (its name, and the fields of its output, are not kept).
func declaredSources(seen []flow.Seen, declared []string) []flow.Seen {
	out := slices.Clone(seen)
	for i, s := range out {
		if name, ok := strings.CutPrefix(s.Source, "tool:"); ok && name != "?" && !slices.Contains(declared, name) {
			out[i] = flow.Seen{Source: "tool:?"}
		}
	}
	return out
}

// setKey is the key of a set of sources: each source and its field, sorted, one per line ("" for
// none).
func setKey(seen []flow.Seen) string {
	parts := make([]string, len(seen))
	for i, s := range seen {
		parts[i] = s.Source + "\t" + s.Field
	}
	slices.Sort(parts)
	return strings.Join(slices.Compact(parts), "\n")
}

// parseSet reads a set's key back.
func parseSet(key string) []Source {
	if key == "" {
		return []Source{}
	}
	var out []Source
	for _, line := range strings.Split(key, "\n") {
		src, field, _ := strings.Cut(line, "\t")
		out = append(out, Source{Source: src, Field: field})
	}
	return out
}

func addCount(m map[string]int, k string) map[string]int {
	if m == nil {
		m = map[string]int{}
	}
	m[k]++
	return m
}
