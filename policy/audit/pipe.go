package audit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBuffer is how many events a Ring, a JSONL or a LogQueue holds in memory while its writer
// is busy or its window is open; beyond it, Ring and JSONL drop (and count) events rather than make
// a request wait.
const DefaultBuffer = 4096

// DefaultWindow is how long a recorder's writer collects events, from the first one, before it
// writes them together: one bbolt transaction (Ring), one write call (JSONL), one run of log lines
// (LogQueue). A crash loses at most the events of the open window.
const DefaultWindow = 100 * time.Millisecond

// maxBatch is the most events written in one transaction (Ring) or one write call (JSONL); that
// many events waiting also ends a window early.
const maxBatch = 512

// errorLogEvery spaces out the log lines about failed writes: a full disk fails every batch.
const errorLogEvery = time.Minute

// ErrClosed is returned by Flush after Close.
var ErrClosed = errors.New("audit: recorder is closed")

// Options tunes how a recorder buffers and writes. The zero value gives the defaults.
type Options struct {
	// Window is how long the writer collects events, from the first one, before it writes them
	// together. 0 means DefaultWindow; a negative window writes whatever is queued as soon as the
	// writer is free. Flush, Close and a full batch end a window at once.
	Window time.Duration
	// Buffer is the most events held in memory, waiting to be written; below 1 means DefaultBuffer.
	Buffer int
}

func (o Options) window() time.Duration {
	if o.Window == 0 {
		return DefaultWindow
	}
	return o.Window
}

func (o Options) buffer() int {
	if o.Buffer < 1 {
		return DefaultBuffer
	}
	return o.Buffer
}

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

// item is a value to write, or a flush marker: a channel closed once every value queued before it
// is written.
type item[T any] struct {
	v     T
	flush chan struct{}
}

// pipe hands values from many goroutines to one writer goroutine through a bounded channel, in the
// order they were queued. The writer wakes for the first value of a window, sleeps out the window
// while more queue up without waking it, then writes them all, in batches of at most maxBatch.
type pipe[T any] struct {
	name   string // for logs: the file
	log    *slog.Logger
	write  func([]T) error
	window time.Duration
	batch  int // the most values per write, and the count that ends a window early

	mu     sync.RWMutex // guards closed and the close of ch against concurrent sends
	closed bool
	ch     chan item[T]
	kick   chan struct{} // ends the open window at once (Flush, a full batch); holds one wake-up at most
	// pending counts the values queued and not yet taken into a write, the one that opened the
	// window included: a full batch of them ends the window.
	pending atomic.Int64
	stop    chan struct{} // closed by close: every window ends at once from then on
	done    chan struct{}
	once    sync.Once

	written, dropped, failed, writeErrors atomic.Uint64
	lastLog                               time.Time // writer goroutine only
	unlogged                              uint64    // writer goroutine only: failures since the last log line
}

func newPipe[T any](name string, o Options, log *slog.Logger, write func([]T) error) *pipe[T] {
	buffer := o.buffer()
	p := &pipe[T]{
		name: name, log: log, write: write, window: o.window(), batch: min(maxBatch, buffer),
		ch: make(chan item[T], buffer), kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	go p.run()
	return p
}

// offer queues v without blocking; when the buffer is full or the pipe closed, v is dropped and
// counted.
func (p *pipe[T]) offer(v T) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		p.dropped.Add(1)
		return
	}
	select {
	case p.ch <- item[T]{v: v}:
	default:
		p.dropped.Add(1)
		return
	}
	if p.pending.Add(1) >= int64(p.batch) {
		p.wake()
	}
}

// put queues v, waiting for room while the buffer is full. It reports false when the pipe is
// closed.
func (p *pipe[T]) put(v T) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return false
	}
	select {
	case p.ch <- item[T]{v: v}:
	default:
		p.wake()
		p.ch <- item[T]{v: v}
	}
	if p.pending.Add(1) >= int64(p.batch) {
		p.wake()
	}
	return true
}

// wake ends the open window, or the next one if none is open.
func (p *pipe[T]) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// flush waits until every value queued before the call is written (or failed), or ctx ends. It ends
// the open window at once.
func (p *pipe[T]) flush(ctx context.Context) error {
	done := make(chan struct{})
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		return ErrClosed
	}
	select {
	case p.ch <- item[T]{flush: done}:
	case <-ctx.Done():
		p.mu.RUnlock()
		return ctx.Err()
	}
	p.wake()
	p.mu.RUnlock()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close stops taking values and waits until the writer has written everything queued.
func (p *pipe[T]) close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		close(p.ch)
		close(p.stop)
		p.mu.Unlock()
	})
	<-p.done
}

func (p *pipe[T]) stats() Stats {
	return Stats{Written: p.written.Load(), Dropped: p.dropped.Load(), Failed: p.failed.Load(), WriteErrors: p.writeErrors.Load()}
}

// run is the writer goroutine. A window opens with the first value queued; when it ends (its time
// is up, a batch is full, a flush or the close asks), what is queued at that moment is written.
func (p *pipe[T]) run() {
	defer close(p.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	batch := make([]T, 0, p.batch)
	commit := func() {
		if len(batch) > 0 {
			p.commit(batch)
			clear(batch) // let the strings go
			batch = batch[:0]
		}
	}
	take := func(it item[T]) {
		if it.flush != nil {
			commit()
			close(it.flush)
			return
		}
		p.pending.Add(-1)
		if batch = append(batch, it.v); len(batch) == p.batch {
			commit()
		}
	}
	for {
		it, ok := <-p.ch
		if !ok {
			return
		}
		if it.flush == nil && p.window > 0 {
			timer.Reset(p.window)
			select {
			case <-timer.C:
			case <-p.kick:
				timer.Stop()
			case <-p.stop:
				timer.Stop()
			}
		}
		take(it)
		for n := len(p.ch); n > 0; n-- {
			it, ok := <-p.ch
			if !ok {
				break
			}
			take(it)
		}
		commit()
	}
}

func (p *pipe[T]) commit(batch []T) {
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
