package audit

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/tidwall/gjson"
	bolt "go.etcd.io/bbolt"

	"github.com/promptgate/promptgate/store/boltfile"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Query limits.
const (
	// DefaultQueryLimit is the number of events Query returns when Filter.Limit is zero.
	DefaultQueryLimit = 100
	// MaxQueryLimit is the most events one Query returns.
	MaxQueryLimit = 1000
	// DefaultLockTimeout is how long OpenRing waits for the file lock.
	DefaultLockTimeout = time.Second
)

// sinceSlack is how far past Filter.Since (into older events) Query keeps reading before it stops:
// events are stored in the order they were recorded, which can differ a little from the order of
// their times.
const sinceSlack = time.Minute

// ring file layout: one bucket "events", key = 8-byte big-endian sequence number (record order),
// value = the event as JSON. The oldest events are deleted once there are more than the ring's
// size.
var bucketEvents = []byte("events")

// Filter selects events in Query. Empty fields match every event; set fields must match exactly.
type Filter struct {
	// Limit is the most events returned: 0 means DefaultQueryLimit; above MaxQueryLimit it is
	// MaxQueryLimit.
	Limit     int
	RequestID string
	Verdict   string
	Protocol  string
	Kind      string
	Tool      string
	// Since, when not zero, keeps events at or after it.
	Since time.Time
	// Until, when not zero, keeps events before it.
	Until time.Time
}

// Ring keeps the most recent events in its own bbolt file, bounded to a number of events (oldest
// dropped first). Record never blocks: events are buffered and written by one goroutine, in the
// order recorded, one transaction per window (Options.Window); a full buffer drops events and
// counts them (Dropped). Write errors are logged and counted (Stats), never returned to the caller.
// A crash loses the events of the open window; every committed window is whole. Create it with
// OpenRing; Close it to write what is buffered.
type Ring struct {
	db   *bolt.DB
	path string
	size int
	p    *pipe[Event]
}

var _ Recorder = (*Ring)(nil)

// OpenRing opens (or creates, mode 0600) the ring file at path, keeping at most size events. The
// file is locked while open; if another process holds it, OpenRing fails after DefaultLockTimeout
// with an error naming the file. An existing file keeps its events; if it holds more than size, the
// oldest are dropped.
func OpenRing(path string, size int, log *slog.Logger) (*Ring, error) {
	return OpenRingWith(path, size, log, Options{})
}

// OpenRingWith is OpenRing with the writer's window and buffer set by o.
func OpenRingWith(path string, size int, log *slog.Logger, o Options) (*Ring, error) {
	if size < 1 {
		return nil, fmt.Errorf("audit: ring %s: size %d: must be at least 1", path, size)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	db, err := boltfile.Open(path, &bolt.Options{Timeout: DefaultLockTimeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("audit: open ring %s: the file is locked by another process (waited %s); is another promptgate using it? give each its own audit.path", path, DefaultLockTimeout)
	}
	if errors.Is(err, boltfile.ErrCorrupt) {
		return nil, fmt.Errorf("audit: open ring %s: the file is damaged: %v; move it away (a new, empty ring is created) or restore it from a backup", path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: open ring %s: %w", path, err)
	}
	r := &Ring{db: db, path: path, size: size}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucketEvents)
		if err != nil {
			return err
		}
		return r.trim(b)
	}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("audit: open ring %s: %w", path, err)
	}
	r.p = newPipe(path, o, log, r.write)
	return r, nil
}

// ErrLocked: the ring file is held by another process (a running promptgate writes it).
var ErrLocked = errors.New("the ring file is locked by another process")

// QueryFile returns the events of the ring file at path that match f, newest first, reading the
// file without creating or changing it (under a shared lock). It fails with ErrLocked while another
// process (a running serve) holds the file, and with an error wrapping fs.ErrNotExist when there is
// no such file.
func QueryFile(ctx context.Context, path string, f Filter) ([]Event, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("audit: ring %s: %w", path, err)
	}
	db, err := boltfile.Open(path, &bolt.Options{Timeout: DefaultLockTimeout, ReadOnly: true})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("audit: ring %s: %w", path, ErrLocked)
	case err != nil:
		return nil, fmt.Errorf("audit: open ring %s: %w", path, err)
	}
	defer db.Close()
	return (&Ring{db: db, path: path}).Query(ctx, f)
}

// Path returns the ring's file.
func (r *Ring) Path() string { return r.path }

// Record queues e for writing and returns at once; a zero Time is set to now. If the buffer is full
// the event is dropped and counted.
func (r *Ring) Record(_ context.Context, e Event) { r.p.offer(stamped(e)) }

// Dropped returns how many events were dropped because the buffer was full.
func (r *Ring) Dropped() uint64 { return r.p.dropped.Load() }

// Stats returns the counts of written, dropped and failed events.
func (r *Ring) Stats() Stats { return r.p.stats() }

// Flush ends the open window and waits until every event recorded before the call is written (or
// failed), so that a Query after it sees them.
func (r *Ring) Flush() error { return r.p.flush(context.Background()) }

// FlushContext is Flush that gives up when ctx ends.
func (r *Ring) FlushContext(ctx context.Context) error { return r.p.flush(ctx) }

// Close writes what is buffered and closes the file. Events recorded after Close are dropped.
func (r *Ring) Close() error {
	r.p.close()
	if err := r.db.Close(); err != nil {
		return fmt.Errorf("audit: close ring %s: %w", r.path, err)
	}
	return nil
}

// stamped returns e with a zero Time set to now.
func stamped(e Event) Event {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	return e
}

// write stores one batch in one transaction and trims the ring.
func (r *Ring) write(batch []Event) error {
	vals := make([][]byte, len(batch))
	for i, e := range batch {
		v, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		vals[i] = v
	}
	return r.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if b == nil {
			return errors.New("bucket events is missing")
		}
		for _, v := range vals {
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put(seqKey(seq), v); err != nil {
				return err
			}
		}
		return r.trim(b)
	})
}

// trim deletes the oldest events beyond the ring's size. Keys are consecutive sequence numbers from
// the oldest kept to the bucket's sequence, so the cut-off is known without counting.
func (r *Ring) trim(b *bolt.Bucket) error {
	last := b.Sequence()
	if last <= uint64(r.size) {
		return nil
	}
	cutoff := last - uint64(r.size)
	c := b.Cursor()
	for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k) <= cutoff; k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

func seqKey(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// Query returns the written events that match f, newest first. Events still in the buffer are not
// seen; call Flush (or FlushContext) first to include them.
func (r *Ring) Query(ctx context.Context, f Filter) ([]Event, error) {
	limit := f.Limit
	switch {
	case limit <= 0:
		limit = DefaultQueryLimit
	case limit > MaxQueryLimit:
		limit = MaxQueryLimit
	}
	var stopBefore time.Time
	if !f.Since.IsZero() {
		stopBefore = f.Since.Add(-sinceSlack)
	}
	out := []Event{}
	err := r.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if b == nil {
			return nil
		}
		c := b.Cursor()
		n := 0
		for k, v := c.Last(); k != nil && len(out) < limit; k, v = c.Prev() {
			if n++; n%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			ok, older := f.match(v, stopBefore)
			if older {
				break
			}
			if !ok {
				continue
			}
			var e Event
			if err := json.Unmarshal(v, &e); err != nil { // copies out of the transaction
				return fmt.Errorf("decode event %d: %w", binary.BigEndian.Uint64(k), err)
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("audit: query ring %s: %w", r.path, err)
	}
	return out, nil
}

// Scan calls fn with every written event at or after since, newest first, with no limit (the ring's
// size bounds it), until fn returns false. covered reports whether the ring reaches back to since:
// it held an event older than since, or it has never dropped an event. Events still in the buffer
// are not seen.
func (r *Ring) Scan(ctx context.Context, since time.Time, fn func(Event) bool) (covered bool, err error) {
	f := Filter{Since: since}
	stopBefore := since.Add(-sinceSlack)
	err = r.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if b == nil {
			covered = true
			return nil
		}
		c := b.Cursor()
		n := 0
		for k, v := c.Last(); k != nil; k, v = c.Prev() {
			if n++; n%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			ok, older := f.match(v, stopBefore)
			if older {
				covered = true
				return nil
			}
			if !ok {
				if t := gjson.GetBytes(v, "time").Time(); t.Before(since) {
					covered = true
				}
				continue
			}
			var e Event
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("decode event %d: %w", binary.BigEndian.Uint64(k), err)
			}
			if !fn(e) {
				return nil
			}
		}
		// The oldest key is sequence 1 when nothing was ever trimmed.
		if k, _ := c.First(); k == nil || binary.BigEndian.Uint64(k) == 1 {
			covered = true
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("audit: scan ring %s: %w", r.path, err)
	}
	return covered, nil
}

// eventPaths are the fields Filter looks at, in the order match reads them.
var eventPaths = []string{"requestId", "verdict", "protocol", "kind", "tool", "time"}

// match reports whether the raw event v passes f, and whether it is so much older than f.Since that
// the scan (newest to oldest) can stop.
func (f Filter) match(v []byte, stopBefore time.Time) (ok, older bool) {
	got := gjson.GetManyBytes(v, eventPaths...)
	if !f.Since.IsZero() || !f.Until.IsZero() {
		t, err := time.Parse(time.RFC3339Nano, got[5].String())
		if err != nil {
			return false, false
		}
		if !f.Since.IsZero() && t.Before(f.Since) {
			return false, t.Before(stopBefore)
		}
		if !f.Until.IsZero() && !t.Before(f.Until) {
			return false, false
		}
	}
	for i, want := range []string{f.RequestID, f.Verdict, f.Protocol, f.Kind, f.Tool} {
		if want != "" && got[i].String() != want {
			return false, false
		}
	}
	return true, false
}
