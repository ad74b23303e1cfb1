package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lockedBuffer is a log destination safe for the queue's goroutine and the test's.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSuffix(l.b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func jsonLog(w *lockedBuffer, level slog.Level) Log {
	return Log{Logger: slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))}
}

// withoutTime returns a log line without its time, and the time.
func withoutTime(t *testing.T, line string) (string, time.Time) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	at, err := time.Parse(time.RFC3339Nano, m["time"].(string))
	if err != nil {
		t.Fatal(err)
	}
	delete(m, "time")
	b, _ := json.Marshal(m)
	return string(b), at
}

// The queue writes the line Log writes, in the order recorded, with the time Record was called, and
// nothing for a level the logger leaves out.
func TestLogQueueSameLinesInOrder(t *testing.T) {
	t.Parallel()
	var queued, direct lockedBuffer
	q := NewLogQueue(jsonLog(&queued, slog.LevelInfo), Options{Window: longWindow})
	directLog := jsonLog(&direct, slog.LevelInfo)
	var times [][2]time.Time
	for i := range 300 {
		e := Event{RequestID: fmt.Sprintf("r%d", i), Kind: KindToolCall, Protocol: "tech", ProtocolVersion: 2, Tool: "web_fetch",
			Verdict: []string{VerdictBlocked, VerdictAllowed, VerdictRemoved}[i%3], Reason: "why", Rule: "rules[0]"}.WithArguments([]byte(`{"q":"secret"}`), true)
		if i%50 == 0 {
			e = Event{Kind: KindActivated, Actor: "ops", Target: "protocols/tech", Version: 3, Verdict: VerdictChanged}
		}
		before := time.Now()
		q.Record(context.Background(), e)
		after := time.Now()
		directLog.Record(context.Background(), e)
		if logLevel(e) >= slog.LevelInfo {
			times = append(times, [2]time.Time{before, after})
		}
	}
	if got := queued.lines(); len(got) != 0 {
		t.Fatalf("%d lines written while the window is open", len(got))
	}
	closeSoon(t, q.Close)
	got, want := queued.lines(), direct.lines()
	if len(got) != len(want) || len(got) != len(times) || len(times) == 0 {
		t.Fatalf("%d lines, Log wrote %d, want %d", len(got), len(want), len(times))
	}
	for i := range got {
		g, at := withoutTime(t, got[i])
		w, _ := withoutTime(t, want[i])
		if g != w {
			t.Fatalf("line %d:\n got %s\nwant %s", i, g, w)
		}
		if at.Before(times[i][0].Round(0)) || at.After(times[i][1].Round(0)) {
			t.Fatalf("line %d has the time %v, not that of its Record (%v … %v)", i, at, times[i][0], times[i][1])
		}
	}
	if strings.Contains(queued.b.String(), "secret") {
		t.Fatal("arguments logged")
	}
}

func TestLogQueueFlush(t *testing.T) {
	t.Parallel()
	var out lockedBuffer
	q := NewLogQueue(jsonLog(&out, slog.LevelDebug), Options{Window: longWindow})
	defer q.Close()
	q.Record(context.Background(), Event{RequestID: "a", Verdict: VerdictAllowed})
	if n := len(out.lines()); n != 0 {
		t.Fatalf("%d lines before the flush", n)
	}
	flushSoon(t, q.p.flush)
	if got := out.lines(); len(got) != 1 || !strings.Contains(got[0], `"request_id":"a"`) {
		t.Fatalf("after the flush: %q", got)
	}
}

// A flood (the log's destination stuck) holds Record up once the buffer is full, instead of
// dropping a line or growing without bound; every line comes out, in order, once the destination
// moves again.
func TestLogQueueFloodWaitsAndKeepsEveryLine(t *testing.T) {
	t.Parallel()
	const buffer, n = 4, 50
	var out lockedBuffer
	gate := make(chan struct{})
	var opened sync.Once
	t.Cleanup(func() { opened.Do(func() { close(gate) }) })
	stuck := writerFunc(func(p []byte) (int, error) { <-gate; return out.Write(p) })
	q := NewLogQueue(Log{Logger: slog.New(slog.NewJSONHandler(stuck, nil))}, Options{Window: longWindow, Buffer: buffer})
	var returned atomic.Int64
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for i := range n {
			q.Record(context.Background(), Event{RequestID: fmt.Sprint(i), Verdict: VerdictBlocked})
			returned.Add(1)
		}
	}()
	// The writer holds at most one batch (buffer lines) and the buffer as many again: Record cannot
	// get further while the destination is stuck.
	deadline := time.Now().Add(hangBound)
	for returned.Load() < buffer {
		if time.Now().After(deadline) {
			t.Fatalf("only %d lines recorded with room for %d", returned.Load(), buffer)
		}
		time.Sleep(time.Millisecond)
	}
	if r := returned.Load(); r > 2*buffer {
		t.Fatalf("%d lines taken with the destination stuck: the queue is not bounded by %d", r, 2*buffer)
	}
	opened.Do(func() { close(gate) })
	select {
	case <-recorded:
	case <-time.After(hangBound):
		t.Fatal("Record still waits after the destination moved")
	}
	closeSoon(t, q.Close)
	got := out.lines()
	if len(got) != n {
		t.Fatalf("%d lines, want %d", len(got), n)
	}
	for i, l := range got {
		if !strings.Contains(l, fmt.Sprintf(`"request_id":"%d"`, i)) {
			t.Fatalf("line %d: %s", i, l)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// After Close, a line is written at once, on the caller's goroutine: none is lost at shutdown.
func TestLogQueueAfterCloseWritesDirectly(t *testing.T) {
	t.Parallel()
	var out lockedBuffer
	q := NewLogQueue(jsonLog(&out, slog.LevelInfo), Options{Window: longWindow})
	q.Record(context.Background(), Event{RequestID: "before", Verdict: VerdictRemoved})
	closeSoon(t, q.Close)
	q.Record(context.Background(), Event{RequestID: "after", Verdict: VerdictRemoved})
	got := out.lines()
	if len(got) != 2 || !strings.Contains(got[0], `"before"`) || !strings.Contains(got[1], `"after"`) {
		t.Fatalf("lines %q", got)
	}
	if err := q.Flush(); err != ErrClosed {
		t.Fatalf("flush after close: %v", err)
	}
}
