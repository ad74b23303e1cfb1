package audit

import (
	"errors"
	"log/slog"
)

// Sinks are the stores of decision events that the audit section configures: the ring, and the JSON
// lines file when the section names one; and the queue that writes each decision's log line off the
// request path.
type Sinks struct {
	// Lines writes the decision lines to the log that Open was given, from its own goroutine.
	Lines *LogQueue
	Ring  *Ring
	// File is nil when the section names no file.
	File *JSONL
}

// Open opens the section's sinks: the ring at its path, or at defaultRing when it names none, and
// its file.
func (c *Config) Open(defaultRing string, log *slog.Logger) (*Sinks, error) {
	path := c.Path
	if path == "" {
		path = defaultRing
	}
	size := c.RingSize
	if size == 0 {
		size = DefaultRingSize
	}
	ring, err := OpenRing(path, size, log)
	if err != nil {
		return nil, err
	}
	s := &Sinks{Ring: ring, Lines: NewLogQueue(Log{Logger: log}, Options{})}
	if c.File != "" {
		if s.File, err = OpenJSONL(c.File, log); err != nil {
			_ = s.Lines.Close()
			_ = ring.Close()
			return nil, err
		}
	}
	return s, nil
}

// Recorders are the sinks as recorders, the ring first.
func (s *Sinks) Recorders() Multi {
	m := Multi{s.Ring}
	if s.File != nil {
		m = append(m, s.File)
	}
	return m
}

// Close closes every sink; the lines queue writes what it holds first.
func (s *Sinks) Close() error {
	err := errors.Join(s.Lines.Close(), s.Ring.Close())
	if s.File != nil {
		err = errors.Join(err, s.File.Close())
	}
	return err
}
