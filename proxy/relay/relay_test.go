package relay

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/sse"
)

// recorder is a Surface that notes what it is asked and writes a marker for each call.
type recorder struct {
	r        Relay
	log      []string
	finished bool
	pass     bool
}

func newRecorder(up io.Reader, done, pass bool) *recorder {
	rc := &recorder{pass: pass}
	s := Surface{
		Finished: func() bool { return rc.finished },
		Truncated: func() {
			rc.log = append(rc.log, "truncated")
			rc.r.Out = append(rc.r.Out, "T\n\n"...)
			rc.r.Ended = true
		},
		Malformed: func() { rc.log = append(rc.log, "malformed") },
		Event: func(ev sse.Event) {
			rc.log = append(rc.log, "event "+string(ev.Data))
			if string(ev.Data) == `{"end":true}` {
				rc.finished = true
			}
			rc.r.Out = append(rc.r.Out, ev.Raw...)
		},
		Observe: func(data []byte) { rc.log = append(rc.log, "observe "+string(data)) },
		Pass: func(ev sse.Event) bool {
			if rc.pass {
				rc.r.Out = append(rc.r.Out, ev.Raw...)
			}
			return rc.pass
		},
	}
	if done {
		s.Done = func() { rc.log = append(rc.log, "done") }
	}
	rc.r = New(io.NopCloser(up), nil, s)
	return rc
}

func readAll(t *testing.T, r *Relay) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRelay(t *testing.T) {
	in := ": keep-alive\n\ndata: not json\n\ndata: {\"a\":1}\n\ndata: {\"a\":1,\"a\":2}\n\ndata: [DONE]\n\n"
	for _, tc := range []struct {
		name       string
		done, pass bool
		out        string
		log        []string
	}{
		{"done ends the stream", true, false, ": keep-alive\n\ndata: not json\n\ndata: {\"a\":1}\n\ndata: [DONE]\n\n",
			[]string{"observe not json", `observe {"a":1}`, `event {"a":1}`, `observe {"a":1,"a":2}`, "malformed", "done"}},
		{"without Done [DONE] is data", false, false, ": keep-alive\n\ndata: not json\n\ndata: {\"a\":1}\n\ndata: [DONE]\n\nT\n\n",
			[]string{"observe not json", `observe {"a":1}`, `event {"a":1}`, `observe {"a":1,"a":2}`, "malformed", "observe [DONE]", "truncated"}},
		{"pass takes JSON before it is checked", true, true, in,
			[]string{"observe not json", `observe {"a":1}`, `observe {"a":1,"a":2}`, "done"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newRecorder(strings.NewReader(in), tc.done, tc.pass)
			if got := readAll(t, &rc.r); got != tc.out {
				t.Errorf("output %q, want %q", got, tc.out)
			}
			if strings.Join(rc.log, "|") != strings.Join(tc.log, "|") {
				t.Errorf("calls %q, want %q", rc.log, tc.log)
			}
		})
	}
}

func TestRelayEnds(t *testing.T) {
	// A clean end after a finishing event ends quietly; before it, or inside an event, it is
	// truncated.
	for _, tc := range []struct{ in, out string }{
		{"data: {\"end\":true}\n\n", "data: {\"end\":true}\n\n"},
		{"data: {\"a\":1}\n\n", "data: {\"a\":1}\n\nT\n\n"},
		{"data: {\"end\":true}\n\ndata: {\"a\"", "data: {\"end\":true}\n\nT\n\n"},
	} {
		rc := newRecorder(strings.NewReader(tc.in), true, false)
		if got := readAll(t, &rc.r); got != tc.out {
			t.Errorf("%q: output %q, want %q", tc.in, got, tc.out)
		}
	}
	// An upstream error is kept for Err, and the stream is truncated.
	boom := errors.New("boom")
	rc := newRecorder(io.MultiReader(strings.NewReader("data: {\"end\":true}\n\n"), &errReader{boom}), true, false)
	if got := readAll(t, &rc.r); got != "data: {\"end\":true}\n\nT\n\n" || !errors.Is(rc.r.Err(), boom) {
		t.Errorf("output %q, err %v", got, rc.r.Err())
	}
	// An upstream error inside an unfinished event is kept for Err too.
	rc = newRecorder(io.MultiReader(strings.NewReader("data: {\"end\":true}\n\ndata: {\"a\""), &errReader{boom}), true, false)
	if got := readAll(t, &rc.r); got != "data: {\"end\":true}\n\nT\n\n" || !errors.Is(rc.r.Err(), boom) {
		t.Errorf("unfinished event: output %q, err %v", got, rc.r.Err())
	}
	// Close ends the stream.
	rc = newRecorder(strings.NewReader("data: {\"a\":1}\n\n"), true, false)
	if err := rc.r.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := rc.r.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Errorf("after Close: %d, %v", n, err)
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }

type meta struct{ n int }

type call struct {
	Pending[meta]
}

func TestPending(t *testing.T) {
	c := vet.NewChecker(vet.Policy{Allowed: map[string]bool{"ok": true}, Mode: vet.ModeError})
	good := &call{Pending[meta]{Call: &vet.Call{ID: "a", Name: "ok", Args: []byte(`{}`)}}}
	good.Hold([]byte("x"), meta{1})
	if len(good.Call.Held()) != 1 || len(good.Meta) != 1 {
		t.Fatalf("held %d, meta %d", len(good.Call.Held()), len(good.Meta))
	}
	big := &call{Pending[meta]{Call: &vet.Call{ID: "b", Name: "ok", Args: []byte(`{}`)}}}
	big.Hold(make([]byte, MaxCallBytes), meta{2})
	big.Hold([]byte("y"), meta{3})
	if big.Lost != vet.ReasonTooLarge || big.Call.Held() != nil || big.Meta != nil || big.Call.Args != nil {
		t.Fatalf("too large a call kept its bytes: lost %q", big.Lost)
	}
	ds, culprit := Verdicts[meta](c, []*call{good, big})
	if ds[0].Blocked() || !ds[1].Blocked() || ds[1].Reason != vet.ReasonTooLarge || culprit != 1 {
		t.Fatalf("decisions %+v, culprit %d", ds, culprit)
	}
	c = vet.NewChecker(vet.Policy{Allowed: map[string]bool{"ok": true}, Mode: vet.ModeRefuse})
	if _, culprit := Verdicts[meta](c, []*call{good, big}); culprit != -1 {
		t.Fatalf("refuse mode has a culprit: %d", culprit)
	}
}

func TestReadDrainsBufferedEvents(t *testing.T) {
	// Two whole events and half of a third arrive in one read: one Read gives both whole events,
	// and does not wait for the rest of the third.
	pr, pw := io.Pipe()
	rc := newRecorder(pr, true, false)
	go func() { _, _ = pw.Write([]byte("data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: {\"a\"")) }()
	p := make([]byte, 1024)
	n, err := rc.r.Read(p)
	if err != nil || string(p[:n]) != "data: {\"a\":1}\n\ndata: {\"a\":2}\n\n" {
		t.Fatalf("first Read: %q, %v", p[:n], err)
	}
	// A small p takes what fits; the rest is handed out by the next Reads, before upstream is read.
	go func() { _, _ = pw.Write([]byte(":3}\n\ndata: {\"a\":4}\n\n")); _ = pw.Close() }()
	n, err = rc.r.Read(p[:4])
	if err != nil || string(p[:n]) != "data" {
		t.Fatalf("second Read: %q, %v", p[:n], err)
	}
	if rest := readAll(t, &rc.r); rest != ": {\"a\":3}\n\ndata: {\"a\":4}\n\nT\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

func TestRelayTyped(t *testing.T) {
	in := "event: a\ndata: {\"type\":\"a\"}\n\nevent: a\ndata: {\"type\":\"b\"}\n\nevent: a\ndata: {\"type\":1}\n\ndata: {\"type\":\"c\"}\n\n"
	for _, typed := range []bool{false, true} {
		rc := newRecorder(strings.NewReader(in), true, false)
		rc.r.s.Typed = typed
		readAll(t, &rc.r)
		got := strings.Join(rc.log, "|")
		want := `observe {"type":"a"}|event {"type":"a"}|observe {"type":"b"}|event {"type":"b"}|observe {"type":1}|event {"type":1}|observe {"type":"c"}|event {"type":"c"}|truncated`
		if typed {
			// The event: line and the type field disagree: malformed. An event without a line goes
			// by its field.
			want = `observe {"type":"a"}|event {"type":"a"}|observe {"type":"b"}|malformed|observe {"type":1}|malformed|observe {"type":"c"}|event {"type":"c"}|truncated`
		}
		if got != want {
			t.Errorf("typed %v: calls\n%s\nwant\n%s", typed, got, want)
		}
	}
}

// readBefore is Read as it was before each step's output went to p at once (Out then grew to the
// size of p on every burst): the reference of FuzzRead.
func readBefore(r *Relay, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for r.off == len(r.Out) {
		r.Out, r.off = r.Out[:0], 0
		if r.Ended {
			return 0, io.EOF
		}
		r.step()
	}
	for !r.Ended && len(r.Out)-r.off < len(p) && r.rd.Buffered() {
		r.step()
	}
	n := copy(p, r.Out[r.off:])
	r.off += n
	return n, nil
}

// chunks returns 1..max bytes per Read, in an order fixed by its seed.
type chunks struct {
	data []byte
	rnd  *rand.Rand
	max  int
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+c.rnd.IntN(c.max), len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// FuzzRead checks that Read hands out the same bytes, Read by Read, and asks the surface the same
// things in the same order as readBefore, for any input, any split of it and any sizes of p.
func FuzzRead(f *testing.F) {
	in := ": keep-alive\n\ndata: not json\n\ndata: {\"a\":1}\n\ndata: {\"a\":1,\"a\":2}\n\nevent: x\ndata: {\"b\":[1,2]}\n\ndata: {\"end\":true}\n\ndata: [DONE]\n\n"
	f.Add([]byte(in), uint64(1), uint8(7), uint8(16), false)
	f.Add([]byte(in), uint64(2), uint8(200), uint8(255), true)
	f.Add([]byte(in), uint64(3), uint8(0), uint8(0), false)
	f.Add([]byte(strings.Repeat("data: {\"t\":\"0123456789\"}\r\n\r\n", 40)+"data: {\"end\":true}\n\n"), uint64(4), uint8(90), uint8(60), false)
	f.Add([]byte("data: {\"a\":1}\n\ndata: {\"a\""), uint64(5), uint8(3), uint8(5), true)
	f.Fuzz(func(t *testing.T, input []byte, seed uint64, split, size uint8, pass bool) {
		run := func(read func(*Relay, []byte) (int, error)) (string, []string) {
			rc := newRecorder(&chunks{data: input, rnd: rand.New(rand.NewPCG(seed, 1)), max: 1 + int(split)}, true, pass)
			sizes := rand.New(rand.NewPCG(seed, 2))
			var trace strings.Builder
			for range 1 << 16 {
				p := make([]byte, 1+sizes.IntN(1+int(size)))
				n, err := read(&rc.r, p)
				fmt.Fprintf(&trace, "%d %q %v\n", n, p[:n], err)
				if err != nil {
					break
				}
			}
			return trace.String(), rc.log
		}
		got, gotLog := run((*Relay).Read)
		want, wantLog := run(readBefore)
		if got != want || !slices.Equal(gotLog, wantLog) {
			t.Fatalf("reads:\n%s\nwant:\n%s\nsurface asked %q, want %q", got, want, gotLog, wantLog)
		}
	})
}

// lender is an upstream body that lends a buffer full of events of its own and counts what comes
// back.
type lender struct {
	io.Reader
	lent     []byte
	returned [][]byte
	closed   int
}

func (l *lender) LendBuffer() []byte    { return l.lent }
func (l *lender) ReturnBuffer(b []byte) { l.returned = append(l.returned, b) }
func (l *lender) Close() error          { l.closed++; return nil }

func TestRelayLentBuffer(t *testing.T) {
	// The reader starts on the lent buffer, whose old bytes never show; Close gives it back once,
	// after which nothing is read.
	in := "data: {\"a\":1}\n\n: note\n\ndata: [DONE]\n\n"
	for _, size := range []int{8 << 10, 16} { // one the reader reads into, one too small that it outgrows
		l := &lender{Reader: strings.NewReader(in), lent: []byte(strings.Repeat("data: {\"old\":1}\n\n", size/16))}
		rc := &recorder{}
		rc.r = New(l, nil, Surface{Finished: func() bool { return false }, Truncated: func() {}, Malformed: func() {},
			Done:  func() {},
			Event: func(ev sse.Event) { rc.r.Out = append(rc.r.Out, ev.Raw...) }})
		if got := readAll(t, &rc.r); got != in {
			t.Fatalf("lent %d bytes: output %q, want %q", size, got, in)
		}
		if len(l.returned) != 0 {
			t.Fatalf("lent %d bytes: the buffer came back before Close", size)
		}
		_ = rc.r.Close()
		_ = rc.r.Close()
		if len(l.returned) != 1 || cap(l.returned[0]) != cap(l.lent) || &l.returned[0][:1][0] != &l.lent[0] || l.closed != 2 {
			t.Fatalf("lent %d bytes: %d buffers back (want the lent one once), body closed %d times", size, len(l.returned), l.closed)
		}
	}
}
