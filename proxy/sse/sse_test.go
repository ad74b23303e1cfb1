package sse

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"
)

// want is the parsed view of one event that the tables compare.
type want struct {
	raw       string
	data      string
	hasData   bool
	event     string
	id        string
	hasID     bool
	retry     int64
	hasRetry  bool
	truncated bool
}

func view(ev Event) want {
	return want{
		raw: string(ev.Raw), data: string(ev.Data), hasData: ev.HasData, event: ev.Event,
		id: ev.ID, hasID: ev.HasID, retry: ev.Retry, hasRetry: ev.HasRetry, truncated: ev.Truncated,
	}
}

var readerCases = []struct {
	name string
	in   string
	want []want
}{
	{"empty", "", nil},
	{"one LF event", "data: hello\n\n", []want{{raw: "data: hello\n\n", data: "hello", hasData: true}}},
	{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", []want{
		{raw: "data: a\r\n\r\n", data: "a", hasData: true},
		{raw: "data: b\r\n\r\n", data: "b", hasData: true},
	}},
	{"CR only", "data: a\r\rdata: b\r\r", []want{
		{raw: "data: a\r\r", data: "a", hasData: true},
		{raw: "data: b\r\r", data: "b", hasData: true},
	}},
	{"mixed line ends", "data: a\r\ndata: b\rdata: c\n\r\nevent: x\n\r", []want{
		{raw: "data: a\r\ndata: b\rdata: c\n\r\n", data: "a\nb\nc", hasData: true},
		{raw: "event: x\n\r", event: "x"},
	}},
	{"CR blank line then LF of the next event", "data: a\r\r\ndata: b\n\n", []want{
		{raw: "data: a\r\r\n", data: "a", hasData: true},
		{raw: "data: b\n\n", data: "b", hasData: true},
	}},
	{"comments", ": ping\n\n:\ndata: x\n: inside\n\n", []want{
		{raw: ": ping\n\n"},
		{raw: ":\ndata: x\n: inside\n\n", data: "x", hasData: true},
	}},
	{"multi-line data", "data: {\ndata:  \"a\": 1\ndata:}\n\n", []want{
		{raw: "data: {\ndata:  \"a\": 1\ndata:}\n\n", data: "{\n \"a\": 1\n}", hasData: true},
	}},
	{"no space after colon", "data:x\n\n", []want{{raw: "data:x\n\n", data: "x", hasData: true}}},
	{"only one space removed", "data:  x \n\n", []want{{raw: "data:  x \n\n", data: " x ", hasData: true}}},
	{"empty data", "data\n\ndata:\n\n", []want{
		{raw: "data\n\n", data: "", hasData: true},
		{raw: "data:\n\n", data: "", hasData: true},
	}},
	{"event id retry", "event: delta\nid: 7\nretry: 1500\ndata: d\n\n", []want{
		{raw: "event: delta\nid: 7\nretry: 1500\ndata: d\n\n", data: "d", hasData: true, event: "delta",
			id: "7", hasID: true, retry: 1500, hasRetry: true},
	}},
	{"bad retry and NUL id ignored", "retry: 1x\nid: a\x00b\ndata: d\n\n", []want{
		{raw: "retry: 1x\nid: a\x00b\ndata: d\n\n", data: "d", hasData: true},
	}},
	{"empty id", "id:\n\n", []want{{raw: "id:\n\n", hasID: true}}},
	{"unknown field", "foo: bar\ndata: d\n\n", []want{{raw: "foo: bar\ndata: d\n\n", data: "d", hasData: true}}},
	{"blank lines between events", "\n\ndata: a\n\n\n", []want{
		{raw: "\n"}, {raw: "\n"}, {raw: "data: a\n\n", data: "a", hasData: true}, {raw: "\n"},
	}},
	{"EOF mid-event", "data: a\n\ndata: b\ndata: c", []want{
		{raw: "data: a\n\n", data: "a", hasData: true},
		{raw: "data: b\ndata: c", data: "b\nc", hasData: true, truncated: true},
	}},
	{"EOF after a line end", "data: a\n", []want{{raw: "data: a\n", data: "a", hasData: true, truncated: true}}},
	{"EOF after CR", "data: a\r", []want{{raw: "data: a\r", data: "a", hasData: true, truncated: true}}},
	{"DONE", "data: {\"x\":1}\n\ndata: [DONE]\n\n", []want{
		{raw: "data: {\"x\":1}\n\n", data: "{\"x\":1}", hasData: true},
		{raw: "data: [DONE]\n\n", data: "[DONE]", hasData: true},
	}},
	{"UTF-8", "data: héllo 😀\n\n", []want{{raw: "data: héllo 😀\n\n", data: "héllo 😀", hasData: true}}},
}

// readAll reads every event from r.
func readAll(t testing.TB, r io.Reader) ([]want, error) {
	sr := NewReader(r)
	var got []want
	for {
		ev, err := sr.Next()
		if err != nil {
			if err == io.EOF {
				return got, nil
			}
			return got, err
		}
		got = append(got, view(ev))
	}
}

func equalEvents(a, b []want) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// splitReader returns the input in pieces whose ends are at the given offsets.
type splitReader struct {
	data []byte
	cuts []int // ascending offsets
	pos  int
}

func (s *splitReader) Read(p []byte) (int, error) {
	if s.pos >= len(s.data) {
		return 0, io.EOF
	}
	end := len(s.data)
	for _, c := range s.cuts {
		if c > s.pos {
			end = min(end, c)
			break
		}
	}
	n := copy(p, s.data[s.pos:end])
	s.pos += n
	return n, nil
}

// randomReader returns 1..max bytes per Read.
type randomReader struct {
	data []byte
	rnd  *rand.Rand
	max  int
}

func (r *randomReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+r.rnd.IntN(r.max), len(p), len(r.data))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func TestReader(t *testing.T) {
	for _, tc := range readerCases {
		t.Run(tc.name, func(t *testing.T) {
			check := func(how string, r io.Reader) {
				t.Helper()
				got, err := readAll(t, r)
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
				if !equalEvents(got, tc.want) {
					t.Fatalf("%s:\n got %+v\nwant %+v", how, got, tc.want)
				}
			}
			check("whole", strings.NewReader(tc.in))
			check("one byte", iotest.OneByteReader(strings.NewReader(tc.in)))
			check("data+EOF", iotest.DataErrReader(strings.NewReader(tc.in)))
			for cut := 1; cut < len(tc.in); cut++ {
				check("cut", &splitReader{data: []byte(tc.in), cuts: []int{cut}})
			}
			rnd := rand.New(rand.NewPCG(1, uint64(len(tc.in))))
			for range 50 {
				check("random", &randomReader{data: []byte(tc.in), rnd: rnd, max: 7})
			}
		})
	}
}

// TestReaderPrompt checks that an event is returned as soon as it is complete, without waiting
// for the next read.
func TestReaderPrompt(t *testing.T) {
	pr, pw := io.Pipe()
	r := NewReader(pr)
	go func() {
		_, _ = pw.Write([]byte("data: a\n"))
		_, _ = pw.Write([]byte("\ndata: b"))
		// The test reads "a" before this write is allowed to finish.
	}()
	ev, err := r.Next()
	if err != nil || string(ev.Data) != "a" {
		t.Fatalf("got %q, %v", ev.Data, err)
	}
	go func() { _, _ = pw.Write([]byte("\n\n")); _ = pw.Close() }()
	ev, err = r.Next()
	if err != nil || string(ev.Data) != "b" || ev.Truncated {
		t.Fatalf("got %+v, %v", view(ev), err)
	}
	if _, err = r.Next(); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
}

func TestReaderHugeLine(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 10<<20)
	in := append(append([]byte("data: "), big...), "\n\ndata: after\n\n"...)
	for _, tc := range []struct {
		name string
		r    io.Reader
	}{
		{"whole", bytes.NewReader(in)},
		{"random", &randomReader{data: in, rnd: rand.New(rand.NewPCG(3, 4)), max: 70000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(tc.r)
			ev, err := r.Next()
			if err != nil || !bytes.Equal(ev.Data, big) || len(ev.Raw) != len(big)+8 {
				t.Fatalf("first event: len %d, %v", len(ev.Data), err)
			}
			ev, err = r.Next()
			if err != nil || string(ev.Data) != "after" {
				t.Fatalf("second event: %q, %v", ev.Data, err)
			}
		})
	}
}

func TestReaderError(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b\n"), iotest.ErrReader(boom)))
	if ev, err := r.Next(); err != nil || string(ev.Data) != "a" {
		t.Fatalf("got %q, %v", ev.Data, err)
	}
	ev, err := r.Next()
	if err != nil || !ev.Truncated || string(ev.Data) != "b" {
		t.Fatalf("got %+v, %v", view(ev), err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("want boom, got %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestReaderNoProgress(t *testing.T) {
	if _, err := NewReader(zeroReader{}).Next(); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("want ErrNoProgress, got %v", err)
	}
}

func TestAppendData(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "data: \n\n"},
		{`{"a":1}`, "data: {\"a\":1}\n\n"},
		{"a\nb\r\nc\rd", "data: a\ndata: b\ndata: c\ndata: d\n\n"},
		{"a\n", "data: a\ndata: \n\n"},
	} {
		got := AppendData(nil, []byte(tc.in))
		if string(got) != tc.want {
			t.Errorf("AppendData(%q) = %q, want %q", tc.in, got, tc.want)
		}
		ev, err := NewReader(bytes.NewReader(got)).Next()
		if err != nil || string(ev.Data) != strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(tc.in) {
			t.Errorf("round trip of %q: %q, %v", tc.in, ev.Data, err)
		}
		var buf bytes.Buffer
		if err := WriteData(&buf, []byte(tc.in)); err != nil || buf.String() != tc.want {
			t.Errorf("WriteData(%q) = %q, %v", tc.in, buf.String(), err)
		}
	}
}

// countingReader counts the reads of r.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.n++
	return c.r.Read(p)
}

func TestReaderBuffered(t *testing.T) {
	cr := &countingReader{r: &splitReader{data: []byte("event: a\ndata: 1\n\nevent: a\ndata: 2\n\nevent: a\nda"), cuts: []int{60}}}
	r := NewReader(cr)
	if r.Buffered() {
		t.Fatal("Buffered before any read")
	}
	first, err := r.Next()
	if err != nil || string(first.Data) != "1" || cr.n != 1 {
		t.Fatalf("got %+v, %v after %d reads", view(first), err, cr.n)
	}
	if !r.Buffered() {
		t.Fatal("the second event is buffered")
	}
	second, err := r.Next()
	if err != nil || string(second.Data) != "2" || cr.n != 1 {
		t.Fatalf("got %+v, %v after %d reads", view(second), err, cr.n)
	}
	// The same name is the same string, not a new one per event.
	if first.Event != "a" || unsafe.StringData(first.Event) != unsafe.StringData(second.Event) {
		t.Fatalf("event names %q and %q are separate strings", first.Event, second.Event)
	}
	if r.Buffered() {
		t.Fatal("half an event is not buffered")
	}
	if ev, err := r.Next(); err != nil || !ev.Truncated || !r.Buffered() {
		t.Fatalf("got %+v, %v", view(ev), err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("want EOF, got %v", err)
	}
}

func FuzzReader(f *testing.F) {
	for _, tc := range readerCases {
		f.Add([]byte(tc.in), uint64(1))
	}
	f.Add([]byte("data: a\r"), uint64(7))
	f.Add([]byte("\r\n\r\r\n\n:\r"), uint64(9))
	f.Add([]byte("\ufeffdata: a\n\n\ufeffdata: b\n\n"), uint64(3))
	f.Add([]byte("\xef\xbbdata: a\n\n"), uint64(1))
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		cr := &countingReader{r: &randomReader{data: in, rnd: rand.New(rand.NewPCG(seed, 0)), max: 9}}
		r := NewReader(cr)
		// Odd seeds lend the reader a buffer that holds events of its own (which must never be
		// read), of a size from none to more than minRead.
		var lent []byte
		if seed%2 == 1 {
			lent = bytes.Repeat([]byte("data: lent\n\n"), int(seed>>1%700))
			r.Lend(lent)
		}
		var all []byte
		var events []Event
		for i := 0; ; i++ {
			// Buffered, asked before some events, changes nothing and is right.
			buffered := seed>>(i%64)&1 == 1 && r.Buffered()
			reads := cr.n
			ev, err := r.Next()
			if buffered && cr.n != reads {
				t.Fatalf("Next read from upstream after Buffered said an event was there")
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(ev.Raw) == 0 {
				t.Fatal("empty event")
			}
			all = append(all, ev.Raw...)
			ev.Raw = bytes.Clone(ev.Raw)
			ev.Data = bytes.Clone(ev.Data)
			events = append(events, ev)
		}
		if !bytes.Equal(all, bytes.TrimPrefix(in, bom)) {
			t.Fatalf("raw bytes do not concatenate to the input:\n got %q\nwant %q", all, in)
		}
		if back := r.Release(); len(lent) > 0 && (cap(back) != cap(lent) || &back[:1][0] != &lent[0]) {
			t.Fatalf("Release gave back %d bytes of capacity, not the lent buffer", cap(back))
		}
		if _, err := r.Next(); err != ErrReleased {
			t.Fatalf("Next after Release: %v, want ErrReleased", err)
		}
		// The events are the specification's, whichever search found their lines.
		checkSpec(t, in, events)
		for i, ev := range events {
			if ev.Truncated && i != len(events)-1 {
				t.Fatalf("truncated event %d is not the last", i)
			}
		}
		// Reading the whole input at once gives the same events.
		whole, err := readAll(t, bytes.NewReader(in))
		if err != nil {
			t.Fatal(err)
		}
		if len(whole) != len(events) {
			t.Fatalf("%d events whole, %d split", len(whole), len(events))
		}
		for i := range whole {
			if whole[i] != view(events[i]) {
				t.Fatalf("event %d differs:\n whole %+v\n split %+v", i, whole[i], view(events[i]))
			}
		}
	})
}

// TestReaderBOM: a byte-order mark at the start of the stream is dropped, as the SSE specification
// says, also when it arrives a byte at a time; one later in the stream is data of its line.
func TestReaderBOM(t *testing.T) {
	in := "\ufeffdata: a\n\n\ufeffdata: b\n\n"
	for _, rd := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
		r := NewReader(rd)
		ev, err := r.Next()
		if err != nil || string(ev.Data) != "a" || string(ev.Raw) != "data: a\n\n" {
			t.Fatalf("first: %v %q %q", err, ev.Data, ev.Raw)
		}
		ev, err = r.Next()
		if err != nil || ev.HasData || string(ev.Raw) != "\ufeffdata: b\n\n" {
			t.Fatalf("second: %v %+v", err, view(ev))
		}
	}
	// Only a part of a mark is no mark.
	ev, err := NewReader(strings.NewReader("\xef\xbb\n\n")).Next()
	if err != nil || string(ev.Raw) != "\xef\xbb\n\n" {
		t.Fatalf("%v %q", err, ev.Raw)
	}
}

func TestReaderMaxEvent(t *testing.T) {
	// Events up to the cap pass, whatever the read sizes; the first one past it fails, its bytes
	// dropped.
	small := "data: " + strings.Repeat("a", 100) + "\n\n"
	big := "data: " + strings.Repeat("b", 10000)
	r := NewReaderMax(iotest.OneByteReader(strings.NewReader(small+small+big+"\n\n"+small)), 1000)
	for i := range 2 {
		ev, err := r.Next()
		if err != nil || string(ev.Raw) != small {
			t.Fatalf("event %d: %v %q", i, err, ev.Raw)
		}
	}
	ev, err := r.Next()
	if !errors.Is(err, ErrEventTooLarge) || len(ev.Raw) != 0 {
		t.Fatalf("the big event: %v, %d bytes", err, len(ev.Raw))
	}
	if cap(r.buf) > 1000+1+minRead {
		t.Fatalf("the buffer grew to %d", cap(r.buf))
	}
	if _, err := r.Next(); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("after the failure: %v", err)
	}
	// Without a cap the same input reads whole.
	r = NewReader(strings.NewReader(small + big + "\n\n"))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if ev, err := r.Next(); err != nil || len(ev.Data) != 10000 {
		t.Fatalf("%v %d", err, len(ev.Data))
	}
}
