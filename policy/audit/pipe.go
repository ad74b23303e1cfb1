package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBuffer is how many events a Ring or JSONL holds in memory while its writer is busy; beyond it,
// events are dropped (and counted) rather than making a request wait.
const DefaultBuffer = 4096

// maxBatch is the most events written in one transaction (Ring) or one write call (JSONL).
const maxBatch = 512

// errorLogEvery spaces out the log lines about failed writes: a full disk fails every batch.
const errorLogEvery = time.Minute

// ErrClosed is returned by Flush after Close.
var ErrClosed = errors.New("audit: recorder is closed")

// Stats counts what happened to the events given to a Ring or a JSONL.
type Stats struct {
	// Written events reached the file.
	Written uint64 `json:"written"`
	// Dropped events found the buffer full (or the recorder closed) and were never written.
	Dropped uint64 `json:"dropped"`
	// Failed events were lost to a write error (full disk, read-only file system, ...).
	Failed uint64 `json:"failed"`
	// WriteErrors counts the failed writes themselves (one per batch).
	WriteErrors uint64 `json:"writeErrors"`
}

// item is an event, or a flush marker: a channel closed once every event queued before it is written.
type item struct {
	ev    Event
	flush chan struct{}
}

// pipe hands events from many goroutines to one writer goroutine through a bounded channel. Sends never
// block: a full channel drops the event. The writer batches what is queued into one write.
type pipe struct {
	name  string // for logs: the file
	log   *slog.Logger
	write func([]Event) error

	mu     sync.RWMutex // guards closed and the close of ch against concurrent sends
	closed bool
	ch     chan item
	done   chan struct{}
	once   sync.Once

	written, dropped, failed, writeErrors atomic.Uint64
	lastLog                               time.Time // writer goroutine only
	unlogged                              uint64    // writer goroutine only: failures since the last log line
}

func newPipe(name string, buffer int, log *slog.Logger, write func([]Event) error) *pipe {
	if buffer < 1 {
		buffer = DefaultBuffer
	}
	p := &pipe{name: name, log: log, write: write, ch: make(chan item, buffer), done: make(chan struct{})}
	go p.run()
	return p
}

// record queues e without blocking; it fills in a zero Time.
func (p *pipe) record(e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		p.dropped.Add(1)
		return
	}
	select {
	case p.ch <- item{ev: e}:
	default:
		p.dropped.Add(1)
	}
}

// flush waits until every event queued before the call is written (or failed), or ctx ends.
func (p *pipe) flush(ctx context.Context) error {
	done := make(chan struct{})
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return ErrClosed
	}
	select {
	case p.ch <- item{flush: done}:
	case <-ctx.Done():
		p.mu.RUnlock()
		return ctx.Err()
	}
	p.mu.RUnlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops taking events and waits until the writer has written everything queued.
func (p *pipe) close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		close(p.ch)
		p.mu.Unlock()
	})
	<-p.done
}

func (p *pipe) stats() Stats {
	return Stats{Written: p.written.Load(), Dropped: p.dropped.Load(), Failed: p.failed.Load(), WriteErrors: p.writeErrors.Load()}
}

// run is the writer goroutine: it takes what is queued, up to maxBatch events, and writes it at once.
func (p *pipe) run() {
	defer close(p.done)
	batch := make([]Event, 0, maxBatch)
	var waiters []chan struct{}
	take := func(it item) {
		if it.flush != nil {
			waiters = append(waiters, it.flush)
		} else {
			batch = append(batch, it.ev)
		}
	}
	for it := range p.ch {
		take(it)
	drain:
		for len(batch) < maxBatch {
			select {
			case it, ok := <-p.ch:
				if !ok {
					break drain
				}
				take(it)
			default:
				break drain
			}
		}
		if len(batch) > 0 {
			p.commit(batch)
			clear(batch) // let the strings go
			batch = batch[:0]
		}
		for _, w := range waiters {
			close(w)
		}
		waiters = waiters[:0]
	}
}

func (p *pipe) commit(batch []Event) {
	err := p.write(batch)
	if err == nil {
		p.written.Add(uint64(len(batch)))
		return
	}
	p.failed.Add(uint64(len(batch)))
	p.writeErrors.Add(1)
	p.unlogged += uint64(len(batch))
	if now := time.Now(); now.Sub(p.lastLog) >= errorLogEvery {
		p.log.Error("audit: write failed; events lost (the request path is not affected)",
			"file", p.name, "lost_events", p.unlogged, "err", err)
		p.lastLog, p.unlogged = now, 0
	}
}
