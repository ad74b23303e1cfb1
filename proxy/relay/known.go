package relay

import (
	"bytes"
	"slices"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// MaxKnownBytes caps the text a relay keeps as known (Relay.Know): a longer one is not kept.
const MaxKnownBytes = 1 << 20

// minKnown is the shortest text a relay keeps as known: shorter, the search costs about what it
// spares.
const minKnown = 64

// Know makes the contents of a JSON string, between its quotes, that jsoncheck accepted whole (a
// text of an event the check read) the relay's known text, in place of the one before. Known
// text is whole tokens of string contents that a reader accepts; an event that repeats it as the
// whole contents of one of its value strings (the done events repeating a message's text) is
// checked without reading it again (see check). A text shorter than minKnown or longer than
// MaxKnownBytes is not kept; a surface that never calls Know turns the shortcut off.
func (r *Relay) Know(contents []byte) {
	r.known = r.known[:0]
	if len(contents) < minKnown || len(contents) > MaxKnownBytes {
		return
	}
	if len(contents) > cap(r.known) {
		r.roomToKnow(len(contents))
	}
	r.known = append(r.known, contents...)
}

// roomToKnow gives the known text room for n bytes: a buffer the upstream body lends
// (BufferLender), as the event reader's, or one of its own of that size.
func (r *Relay) roomToKnow(n int) {
	r.returnKnown()
	if l, ok := r.up.(BufferLender); ok {
		buf := l.LendBuffer()
		if cap(buf) >= n {
			r.known, r.knownLent = buf[:0], l
			return
		}
		l.ReturnBuffer(buf)
	}
	r.known = make([]byte, 0, n)
}

// returnKnown gives the known text's buffer back to the body that lent it, if one did, and forgets
// the text.
func (r *Relay) returnKnown() {
	if r.knownLent != nil {
		r.knownLent.ReturnBuffer(r.known)
	}
	r.known, r.knownLent = nil, nil
}

// KnownCuts is how many events the check read without their known text (a test's count of the
// shortcut taken).
func (r *Relay) KnownCuts() int { return r.cuts }

// check is jsoncheck.ObjectMembers of data into r.members, with the known text read once: where
// data holds it between two quotes, data without it is checked instead, and the members found are
// moved back to their places in data. Known text is whole tokens of string contents, so cutting it
// out of a string (at the string's start, or after an escaped quote) changes neither the string's
// validity nor anything else of data; a cut anywhere else (between two strings) leaves two strings
// side by side, which the check refuses, and a cut out of a key changes the key, which is looked
// for after the check: either way data is then checked whole.
func (r *Relay) check(data []byte) error {
	l := jsoncheck.Limits{MaxDepth: r.s.MaxDepth}
	if r.members.Top == nil {
		r.members.Top = r.top[:0]
	}
	r.members = jsoncheck.Members{Top: r.members.Top[:0], Inner: r.members.Inner[:0]}
	n := len(r.known)
	if n < minKnown || len(data) < n+2 {
		return jsoncheck.ObjectMembers(data, l, "", &r.members)
	}
	p := bytes.Index(data, r.known)
	if p < 1 || p+n >= len(data) || data[p-1] != '"' || data[p+n] != '"' {
		return jsoncheck.ObjectMembers(data, l, "", &r.members)
	}
	// The cut is made in the room after Out, which the event's output needs next anyway.
	r.Out = slices.Grow(r.Out, len(data))
	cut := append(append(r.Out[len(r.Out):], data[:p]...), data[p+n:]...)
	r.cut = cut
	if jsoncheck.ObjectMembers(cut, l, "", &r.members) == nil && !keyAt(cut, p) {
		moveMembers(r.members.Top, p, n)
		moveMembers(r.members.Inner, p, n)
		r.cuts++
		return nil
	}
	r.members = jsoncheck.Members{Top: r.members.Top[:0], Inner: r.members.Inner[:0]}
	return jsoncheck.ObjectMembers(data, l, "", &r.members)
}

// keyAt reports whether the quote at b[p], which closes a string of b, is followed by a colon: the
// string is a key.
func keyAt(b []byte, p int) bool {
	for i := p + 1; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
		case ':':
			return true
		default:
			return false
		}
	}
	return false
}

// moveMembers moves the offsets of members found in data with n bytes cut out at p to their places
// in data.
func moveMembers(ms []jsoncheck.Member, p, n int) {
	at := func(o *int) {
		if *o >= p {
			*o += n
		}
	}
	for i := range ms {
		m := &ms[i]
		at(&m.KeyStart)
		at(&m.KeyEnd)
		at(&m.ValueStart)
		at(&m.ValueEnd)
	}
}
