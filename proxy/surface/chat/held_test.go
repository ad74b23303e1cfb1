package chat

import (
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
)

// eventSource is an upstream stream made one event at a time, so that a test can stream hundreds of
// MiB without holding them itself. Before it gives the event numbered at, it calls probe: the relay
// reads the upstream only when it has handled everything before, so probe sees what the relay holds
// at that point.
type eventSource struct {
	event func(i int) (string, bool) // the data of event i; false past the end
	at    int
	probe func()
	i     int
	buf   []byte
}

func (s *eventSource) Read(p []byte) (int, error) {
	for len(s.buf) == 0 {
		if s.i == s.at && s.probe != nil {
			s.probe()
		}
		data, ok := s.event(s.i)
		if !ok {
			return 0, io.EOF
		}
		s.i++
		s.buf = []byte("data: " + data + "\n\n")
	}
	n := copy(p, s.buf)
	s.buf = s.buf[n:]
	return n, nil
}

func (s *eventSource) Close() error { return nil }

// heapInUse is the heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// streamHeld runs events through a Stream and returns how much the heap grew while it held what
// came before event at, and the decisions.
func streamHeld(t *testing.T, events func(i int) (string, bool), at int) (int64, []vet.Decision) {
	t.Helper()
	var ds []vet.Decision
	before := heapInUse()
	var grown int64
	src := &eventSource{event: events, at: at, probe: func() { grown = heapInUse() - before }}
	s := NewStream(src, checkerFor(vet.ModeRefuse, false), func(d vet.Decision) { ds = append(ds, d) })
	if _, err := io.Copy(io.Discard, s); err != nil {
		t.Fatal(err)
	}
	return grown, ds
}

// What one stream holds is bounded: a call blocked for its size holds nothing more however long its
// arguments go on, and the calls held at once (one per choice here) hold at most
// relay.MaxStreamBytes together, the call that would pass it blocked for its size. An upstream that
// compresses its stream (the transport decodes gzip) could otherwise make a few KiB on the wire
// hold GiBs. Not parallel: it measures the heap.
func TestStreamHeldBytesBounded(t *testing.T) {
	mib := strings.Repeat("a", 1<<20)
	t.Run("a call past its cap", func(t *testing.T) {
		const pieces = 80 // 16 MiB held (its events and its arguments) blocks it; 64 MiB more follow
		grown, ds := streamHeld(t, func(i int) (string, bool) {
			switch {
			case i == 0:
				return chunk(choice(0, `{"role":"assistant","tool_calls":[`+tc(0, "call_1", "search", `{"q":"`)+`]}`, "")), true
			case i <= pieces:
				return toolEv(0, tc(0, "", "", mib)), true
			case i == pieces+1:
				return toolEv(0, tc(0, "", "", `"}`)), true
			case i == pieces+2:
				return finish(0, "tool_calls"), true
			case i == pieces+3:
				return done, true
			}
			return "", false
		}, pieces+1)
		if len(ds) != 1 || !ds[0].Blocked() || ds[0].Reason != vet.ReasonTooLarge {
			t.Fatalf("decisions: %+v", ds)
		}
		t.Logf("heap grew by %d MiB", grown>>20)
		if grown > 40<<20 {
			t.Fatalf("a call blocked for its size went on holding its arguments: the heap grew by %d MiB for %d MiB of them", grown>>20, pieces)
		}
	})
	t.Run("many calls at once", func(t *testing.T) {
		const choices, pieces = 24, 4 // 8 MiB held per call, 192 MiB together
		n := choices * (pieces + 2)
		grown, ds := streamHeld(t, func(i int) (string, bool) {
			ch, k := i%choices, i/choices
			switch {
			case k == 0:
				return chunk(choice(ch, `{"role":"assistant","tool_calls":[`+tc(0, "call_1", "search", `{"q":"`)+`]}`, "")), true
			case k <= pieces:
				return toolEv(ch, tc(0, "", "", mib)), true
			case k == pieces+1:
				return toolEv(ch, tc(0, "", "", `"}`)), true
			case i == n:
				return done, true
			}
			return "", false
		}, n)
		if len(ds) != choices {
			t.Fatalf("%d decisions, want %d", len(ds), choices)
		}
		allowed, tooLarge := 0, 0
		for _, d := range ds {
			switch {
			case !d.Blocked():
				allowed++
			case d.Reason == vet.ReasonTooLarge:
				tooLarge++
			default:
				t.Errorf("call blocked for %q", d.Reason)
			}
		}
		t.Logf("heap grew by %d MiB; %d calls allowed, %d blocked for their size", grown>>20, allowed, tooLarge)
		if allowed == 0 || tooLarge == 0 {
			t.Errorf("%d calls allowed, %d blocked for their size: want the calls within %d MiB allowed and the others blocked", allowed, tooLarge, relay.MaxStreamBytes>>20)
		}
		if grown > 2*relay.MaxStreamBytes {
			t.Fatalf("a stream's held calls grew the heap by %d MiB", grown>>20)
		}
	})
}
