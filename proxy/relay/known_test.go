package relay

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/proxy/sse"
)

// FuzzKnownCheck: the relay's check with a known text decides as the check of the whole event and
// finds the same members, wherever the text is in the event (a value, a key, a part of a string,
// between strings, twice). data is the event with each '@' replaced by the known text; piece is
// what Know is given, the contents of a string that jsoncheck accepts, or the input is skipped.
func FuzzKnownCheck(f *testing.F) {
	for _, c := range [][2]string{
		{`{"a":"@"}`, " word"},
		{`{"type":"x","text":"@","logprobs":[]}`, " word"},
		{`{"@":1}`, "a"},
		{`{"@":1,"@":2}`, "a"},
		{`{"a":"@","@":2}`, "a"},
		{`{"@":"@"}`, "b"},
		{`{"a":"x\"@"}`, "c"},
		{`{"a":"x\\"@"}`, "c"},
		{`{"a":"x"@"b":1}`, ",\"q"},
		{`{"a":"x"@"}`, `,\"q`},
		{`{"a":["@","@"]}`, `\ud83d\ude00é`},
		{`{"a":{"b":"@"},"c":"@"}`, `\n\"\\\/`},
		{`{"a":"\ud83d@"}`, `\ude00`},
		{`{"a":"@\ude00"}`, `x\ud83d`},
		{`{"a":"@" , "b" : "@" }`, "z"},
		{`{"a":"@"   :1}`, "z"},
		{"{\"a\":\"@\x01\"}", "z"},
	} {
		f.Add([]byte(c[0]), []byte(c[1]))
	}
	f.Fuzz(func(t *testing.T, tmpl, piece []byte) {
		if len(piece) == 0 || jsoncheck.Value(append(append([]byte{'"'}, piece...), '"'), jsoncheck.Limits{}) != nil {
			return
		}
		var r Relay
		r.Know(bytes.Repeat(piece, minKnown/len(piece)+1))
		data := bytes.ReplaceAll(tmpl, []byte("@"), r.known)
		got := r.check(data)
		var wantM jsoncheck.Members
		want := jsoncheck.ObjectMembers(data, jsoncheck.Limits{}, "", &wantM)
		if (got == nil) != (want == nil) {
			t.Fatalf("check(%q) with known %q: %v, the whole check: %v", data, r.known, got, want)
		}
		if gotM := r.members; got == nil && (!sameList(gotM.Top, wantM.Top) ||
			!sameList(gotM.Inner, wantM.Inner) || gotM.FoldableKey != wantM.FoldableKey) {
			t.Fatalf("check(%q) with known %q found members %+v, the whole check %+v", data, r.known, gotM, wantM)
		}
	})
}

// TestKnownCheckReadsOnce: the check does read an event without its known text (which is how it
// spares the reading); a text too short or too long to be worth it is not kept.
func TestKnownCheckReadsOnce(t *testing.T) {
	text := bytes.Repeat([]byte(" word"), 20)
	data := []byte(`{"type":"x","text":"` + string(text) + `","n":1}`)
	var r Relay
	r.Know(text)
	if err := r.check(data); err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"x","text":"","n":1}`; string(r.cut) != want || r.KnownCuts() != 1 {
		t.Fatalf("checked %q (%d cuts), want %q", r.cut, r.KnownCuts(), want)
	}
	if m := r.members.Top[1]; string(data[m.ValueStart:m.ValueEnd]) != `"`+string(text)+`"` {
		t.Fatalf("the text member is %q", data[m.ValueStart:m.ValueEnd])
	}
	for _, n := range []int{minKnown - 1, MaxKnownBytes + 1} {
		r.Know(text)
		if r.Know(make([]byte, n)); len(r.known) != 0 {
			t.Fatalf("a text of %d bytes is kept", n)
		}
	}
}

// poolLender is an upstream body that lends a new buffer of size bytes each time and counts what
// comes back.
type poolLender struct {
	io.Reader
	size             int
	lent, returned   int
	returnedOwnSized bool
}

func (l *poolLender) LendBuffer() []byte { l.lent++; return make([]byte, l.size) }
func (l *poolLender) ReturnBuffer(b []byte) {
	l.returned++
	l.returnedOwnSized = l.returnedOwnSized || cap(b) != l.size
}
func (l *poolLender) Close() error { return nil }

func TestKnownTextLentBuffer(t *testing.T) {
	// The known text lives in a buffer the body lends, given back at Close (or at once, for one of
	// the relay's own, when the text does not fit); never a buffer that was not lent.
	in := strings.Repeat("data: {\"a\":1}\n\n", 40)
	for _, size := range []int{1 << 10, 64} {
		l := &poolLender{Reader: strings.NewReader(in), size: size}
		text := strings.Repeat("0123456789", 40)
		var r *Relay
		rel := New(l, nil, Surface{Finished: func() bool { return true }, Truncated: func() {}, Malformed: func() {},
			Event: func(ev sse.Event) {
				r.Know([]byte(text))
				r.Out = append(r.Out, ev.Raw...)
			}})
		r = &rel
		if got := readAll(t, r); got != in {
			t.Fatalf("output %q", got)
		}
		if string(r.known) != text {
			t.Fatalf("known text %q", r.known)
		}
		_ = r.Close()
		if l.lent != 2 || l.returned != 2 || l.returnedOwnSized || r.known != nil {
			t.Fatalf("lent %d buffers of %d bytes, %d came back (one not lent: %v)", l.lent, size, l.returned, l.returnedOwnSized)
		}
	}
}

// sameList reports whether two member lists hold the same members (an empty list and none are one).
func sameList[S ~[]E, E any](a, b S) bool {
	return len(a) == 0 && len(b) == 0 || reflect.DeepEqual(a, b)
}
