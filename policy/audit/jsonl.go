package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
)

// JSONL appends every event as one JSON line to a file (audit.file in the config), for log
// shippers. Like Ring, Record never blocks: events are buffered and written by one goroutine, in
// the order recorded, one write call per window (Options.Window); a full buffer drops and counts
// them, and a write error is logged and counted. The file is opened for appending (created with
// mode 0600), so it can be rotated by moving it away and restarting, or shared with tail -f; it may
// also be a pipe or a device such as /dev/stdout.
type JSONL struct {
	f      *os.File
	path   string
	p      *pipe[Event]
	broken bool // writer goroutine only: the last write stopped in the middle of a line
	// regular is false for a pipe or a device such as /dev/stdout, which cannot be synced.
	regular bool
}

var _ Recorder = (*JSONL)(nil)

// OpenJSONL opens (or creates) path for appending.
func OpenJSONL(path string, log *slog.Logger) (*JSONL, error) {
	return OpenJSONLWith(path, log, Options{})
}

// OpenJSONLWith is OpenJSONL with the writer's window and buffer set by o.
func OpenJSONLWith(path string, log *slog.Logger, o Options) (*JSONL, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: open %s: %w", path, err)
	}
	j := &JSONL{f: f, path: path}
	if info, err := f.Stat(); err == nil {
		j.regular = info.Mode().IsRegular()
	}
	j.p = newPipe(path, o, log, j.write)
	return j, nil
}

// Path returns the file.
func (j *JSONL) Path() string { return j.path }

// Record queues e for writing and returns at once; a zero Time is set to now.
func (j *JSONL) Record(_ context.Context, e Event) { j.p.offer(stamped(e)) }

// Dropped returns how many events were dropped because the buffer was full.
func (j *JSONL) Dropped() uint64 { return j.p.dropped.Load() }

// Stats returns the counts of written, dropped and failed events.
func (j *JSONL) Stats() Stats { return j.p.stats() }

// Flush ends the open window and waits until every event recorded before the call is written (or
// failed).
func (j *JSONL) Flush() error { return j.p.flush(context.Background()) }

// Close writes what is buffered, syncs and closes the file.
func (j *JSONL) Close() error {
	j.p.close()
	var serr error
	if j.regular {
		serr = j.f.Sync()
	}
	if err := j.f.Close(); err != nil {
		return fmt.Errorf("audit: close %s: %w", j.path, err)
	}
	if serr != nil {
		return fmt.Errorf("audit: sync %s: %w", j.path, serr)
	}
	return nil
}

// write appends one batch with a single write call. After a write that stopped in the middle of a
// line, the next one starts with a line break, so that one bad line does not swallow the next
// event.
func (j *JSONL) write(batch []Event) error {
	var buf bytes.Buffer
	if j.broken {
		buf.WriteByte('\n')
	}
	for _, e := range batch {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	n, err := j.f.Write(buf.Bytes())
	if err != nil {
		if n > 0 { // a partial line is on disk (with nothing written, the state is unchanged)
			j.broken = true
		}
		return err
	}
	j.broken = false
	return nil
}
