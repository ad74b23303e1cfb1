package sse

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"unsafe"
)

// specEvents is in as the SSE specification splits it, written from its wording alone with no
// shortcut, to hold the Reader's searches to: a byte-order mark at the start is dropped; a line
// ends at CRLF, LF or CR; an event is every line up to and including a blank one; what is left at
// the end is one truncated event. plain is what Event.Plain must say of each event where the
// stream holds no CR.
func specEvents(in []byte) (events []want, plain []bool) {
	in = bytes.TrimPrefix(in, bom)
	start := 0
	var lines [][]byte
	for i := 0; i < len(in); {
		j := i
		for j < len(in) && in[j] != '\r' && in[j] != '\n' {
			j++
		}
		if j == len(in) {
			lines = append(lines, in[i:])
			break
		}
		end := j + 1
		if in[j] == '\r' && end < len(in) && in[end] == '\n' {
			end++
		}
		line := in[i:j]
		lines = append(lines, line)
		i = end
		if len(line) == 0 {
			ev, p := specEvent(in[start:i], lines, false)
			events, plain = append(events, ev), append(plain, p)
			start, lines = i, nil
		}
	}
	if start < len(in) {
		ev, p := specEvent(in[start:], lines, true)
		events, plain = append(events, ev), append(plain, p)
	}
	return events, plain
}

// specEvent reads the fields of one event from its lines.
func specEvent(raw []byte, lines [][]byte, truncated bool) (want, bool) {
	w := want{raw: string(raw), truncated: truncated}
	plain := !truncated && !bytes.Contains(raw, []byte{'\r'})
	var data []string
	for _, l := range lines {
		if len(l) == 0 || l[0] == ':' {
			continue
		}
		name, value, colon := strings.Cut(string(l), ":")
		value = strings.TrimPrefix(value, " ")
		plain = plain && colon
		switch name {
		case "data":
			w.hasData = true
			data = append(data, value)
		case "event":
			w.event = value
		case "id":
			if !strings.Contains(value, "\x00") {
				w.id, w.hasID = value, true
			}
		case "retry":
			digits := value != "" && strings.Trim(value, "0123456789") == ""
			if n, err := strconv.ParseInt(value, 10, 64); digits && err == nil {
				w.retry, w.hasRetry = n, true
			}
		default:
			plain = false
		}
	}
	w.data = strings.Join(data, "\n")
	return w, plain
}

// checkSpec fails the test unless events are specEvents(in), and each Plain event is plain.
func checkSpec(t *testing.T, in []byte, events []Event) {
	t.Helper()
	want, plain := specEvents(in)
	if len(events) != len(want) {
		t.Fatalf("%d events, the specification reads %d", len(events), len(want))
	}
	noCR := !bytes.Contains(in, []byte{'\r'})
	for i, ev := range events {
		if view(ev) != want[i] {
			t.Fatalf("event %d:\n got %+v\nspec %+v", i, view(ev), want[i])
		}
		if ev.Plain && !plain[i] || noCR && ev.Plain != plain[i] {
			t.Fatalf("event %d %q: Plain %v, the specification's lines say %v", i, ev.Raw, ev.Plain, plain[i])
		}
	}
}

// TestReaderPlain: Plain on the forms a relay forwards as they come, and on each that it must
// look at again.
func TestReaderPlain(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		plain    []bool
	}{
		{"fields and comments", "event: a\nid: 1\nretry: 5\ndata: x\n: c\n\n:\n\n\n", []bool{true, true, true}},
		{"a field without its colon", "data\n\nevent\ndata: x\n\n", []bool{false, false}},
		{"an unknown field", "foo: bar\ndata: x\n\n", []bool{false}},
		{"a space before the field", " data: x\n\n", []bool{false}},
		{"truncated", "data: x\n\ndata: y\n", []bool{true, false}},
		{"after a CR the Reader leaves it to the caller", "data: x\n\ndata: y\r\n\r\ndata: z\n\n", []bool{true, false, false}},
		{"a lone CR", "data: x\rdata: y\n\n", []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A byte per read: the Reader has seen no byte of an event that follows the one it
			// returns.
			events := readEvents(iotest.OneByteReader(strings.NewReader(tc.in)))
			if len(events) != len(tc.plain) {
				t.Fatalf("%d events, want %d", len(events), len(tc.plain))
			}
			for i, ev := range events {
				if ev.Plain != tc.plain[i] {
					t.Errorf("event %d %q: Plain %v, want %v", i, ev.Raw, ev.Plain, tc.plain[i])
				}
			}
			checkSpec(t, []byte(tc.in), events)
		})
	}
}

// TestReaderSpec: every table case as the specification reads it.
func TestReaderSpec(t *testing.T) {
	for _, tc := range readerCases {
		checkSpec(t, []byte(tc.in), readEvents(strings.NewReader(tc.in)))
	}
}

// readEvents reads every event of r, each copied out of the Reader's buffer.
func readEvents(r io.Reader) []Event {
	sr := NewReader(r)
	var events []Event
	for {
		ev, err := sr.Next()
		if err != nil {
			return events
		}
		ev.Raw, ev.Data = bytes.Clone(ev.Raw), bytes.Clone(ev.Data)
		events = append(events, ev)
	}
}

// TestReaderNames: an event named as one of the names given to Names gets that very string; other
// names are read as before, and the given slice is never written.
func TestReaderNames(t *testing.T) {
	names := []string{"delta", "done"}
	r := NewReader(strings.NewReader("event: delta\ndata: 1\n\nevent: other\ndata: 2\n\nevent: done\ndata: 3\n\nevent: other\n\n"))
	r.Names(names)
	var got []string
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		got = append(got, ev.Event)
		for _, n := range names {
			if ev.Event == n && unsafe.StringData(ev.Event) != unsafe.StringData(n) {
				t.Errorf("event %q: a new string, not the one given", ev.Event)
			}
		}
	}
	if strings.Join(got, ",") != "delta,other,done,other" || names[0] != "delta" || names[1] != "done" || cap(names) != 2 {
		t.Fatalf("events %q, names %q", got, names)
	}
	allocs := testing.AllocsPerRun(20, func() {
		r := NewReader(strings.NewReader("event: delta\ndata: 1\n\nevent: done\ndata: 3\n\n"))
		r.Lend(make([]byte, 0, 4096))
		r.Names(names)
		for {
			if _, err := r.Next(); err != nil {
				return
			}
		}
	})
	if allocs > 4 { // the reader, its strings.Reader and the lent buffer (made in the function)
		t.Fatalf("%.0f allocations for a stream of named events", allocs)
	}
}
