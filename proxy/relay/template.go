package relay

import (
	"bytes"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// Template is an earlier event of a stream that later events are compared with, so that a surface
// can skip reading an event whose JSON differs from one it has read only in a few values. The
// template's bytes must be one valid JSON object, and its slots the places of values that may
// differ; the relay hands surfaces only valid JSON, so an event whose bytes are the template's
// outside those slots has the template's structure and keys, and differs only in those values (see
// SlotKind for what each kind lets through).
type Template struct {
	ev    []byte
	slots []Slot
}

// SlotKind says what a slot of a template may hold in a matching event.
type SlotKind uint8

const (
	// Plain is a string's contents that may differ only if they hold no backslash or control byte:
	// the first quote after the slot's start ends them, so no escape can hide a quote, a key or a
	// structure.
	Plain SlotKind = iota
	// Escaped is a string's contents, escapes and all (their end found by the escape rules); Match
	// hands them out with their quotes.
	Escaped
	// Digits is a number of decimal digits alone (no sign, fraction or exponent); Match hands them
	// out.
	Digits
	// String is a string's contents that a JSON reader accepts, read as jsoncheck reads a string
	// (valid escapes and UTF-8, no control byte); Match hands them out with their quotes. It is the
	// kind for a template matched before the relay's check: what it lets through is what the check
	// would have let through.
	String
)

// Slot is the place of a value in a template: a string's contents (quotes excluded) or a number's
// digits.
type Slot struct {
	From, To int
	Kind     SlotKind
}

// SlotOf is the slot of kind k of value v, read by gjson from data: a string's contents for Plain,
// Escaped and String, the digits of an integer written as digits alone for Digits. ok is false
// when v is not of that kind or its offset does not point at its bytes in data.
func SlotOf(data []byte, v gjson.Result, k SlotKind) (_ Slot, ok bool) {
	from, to := v.Index, v.Index+len(v.Raw)
	if from <= 0 || to > len(data) || string(data[from:to]) != v.Raw {
		return Slot{}, false
	}
	if k == Digits {
		return Slot{From: from, To: to, Kind: k}, v.Type == gjson.Number && strings.Trim(v.Raw, "0123456789") == ""
	}
	return Slot{From: from + 1, To: to - 1, Kind: k}, v.Type == gjson.String
}

// Set makes data the template, with slots in order of From, none overlapping another, each inside
// data. Set copies data; the slots' backing array is kept.
func (t *Template) Set(data []byte, slots []Slot) {
	t.ev = append(t.ev[:0], data...)
	t.slots = append(t.slots[:0], slots...)
}

// Reset forgets the template.
func (t *Template) Reset() { t.ev, t.slots = t.ev[:0], t.slots[:0] }

// Empty reports whether there is no template.
func (t *Template) Empty() bool { return len(t.ev) == 0 }

// Match reports whether data equals the template outside its slots, each slot of data holding what
// its kind lets through. got receives data's Escaped, String and Digits slots in order (a string
// with its quotes); it must have room for them, or be nil to receive none.
func (t *Template) Match(data []byte, got [][]byte) bool {
	if len(t.ev) == 0 {
		return false
	}
	i, j, n := 0, 0, 0 // the template's and data's offsets (the bytes before them are alike), slots handed out
	for _, sl := range t.slots {
		seg := t.ev[i:sl.From] // up to the slot, a string's opening quote included
		if len(data)-j < len(seg) || !bytes.Equal(data[j:j+len(seg)], seg) {
			return false
		}
		j += len(seg)
		end := j
		switch sl.Kind {
		case Plain:
			for ; end < len(data) && data[end] != '"'; end++ {
				if data[end] == '\\' || data[end] < 0x20 {
					return false
				}
			}
		case Escaped:
			for ; end < len(data) && data[end] != '"'; end++ {
				if data[end] == '\\' {
					end++ // the escaped byte
				}
			}
		case Digits:
			for ; end < len(data) && '0' <= data[end] && data[end] <= '9'; end++ {
			}
			if end == j {
				return false
			}
		case String:
			// Printable ASCII up to the closing quote is a valid string as it is; anything else is
			// read by jsoncheck, from the opening quote that the segment ended with.
			for ; end < len(data) && data[end] != '"' && data[end] != '\\' && data[end] >= 0x20 && data[end] < 0x80; end++ {
			}
			if end < len(data) && data[end] != '"' {
				e, ok := jsoncheck.StringEnd(data, j-1)
				if !ok {
					return false
				}
				end = e - 1
			}
		}
		if end >= len(data) {
			return false
		}
		switch sl.Kind {
		case Escaped, String:
			if got != nil {
				got[n] = data[j-1 : end+1]
				n++
			}
		case Digits:
			if got != nil {
				got[n] = data[j:end]
				n++
			}
		}
		i, j = sl.To, end
	}
	return bytes.Equal(data[j:], t.ev[i:])
}
