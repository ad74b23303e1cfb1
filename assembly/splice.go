package assembly

import (
	"slices"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy"
)

// Splice is one edit of a body made in a single copy of it: the bytes [From, To) replaced by With, or, when
// Own is not 0, by what the caller writes there itself (a value written straight into the new body).
type Splice struct {
	From, To int
	With     []byte
	// Own tells the caller's own writer (see Spliced) which of its values goes here; 0 writes With.
	Own int
}

// Spliced is body with the edits made, in one new slice: each edit's With, or what own appends for an edit
// whose Own is set. extra is the room the own values need. The edits are sorted by position in place (edits
// at one position keep their order); ok is false when two of them overlap, for the caller to make the edits
// another way.
func Spliced(body []byte, edits []Splice, extra int, own func(dst []byte, e Splice) []byte) (out []byte, ok bool) {
	slices.SortStableFunc(edits, func(a, b Splice) int { return a.From - b.From })
	size := len(body) + extra
	for i, e := range edits {
		if i > 0 && e.From < edits[i-1].To {
			return nil, false
		}
		size += len(e.With) - (e.To - e.From)
	}
	out = make([]byte, 0, size)
	at := 0
	for _, e := range edits {
		out = append(out, body[at:e.From]...)
		if e.Own != 0 {
			out = own(out, e)
		} else {
			out = append(out, e.With...)
		}
		at = e.To
	}
	return append(out, body[at:]...), true
}

// Deletion is the Splice that deletes the top-level member whose value is v, as sjson.DeleteBytes does on
// body, or, when appended, on body with a member appended first (AppendedMember). ok is false where a
// splice would not give sjson's bytes: v not located in body (Index 0), or, when appended, v the only
// member of body (sjson then deletes the appended member's comma too).
func Deletion(body []byte, v gjson.Result, appended bool) (e Splice, ok bool) {
	if v.Index <= 0 {
		return Splice{}, false
	}
	e.From, e.To = deletedMember(body, v)
	if appended && e.From == 1 && e.To == v.Index+len(v.Raw) {
		return Splice{}, false // the first member with no comma after it: the only one
	}
	return e, true
}

// deletedMember is the span sjson.DeleteBytes removes for the top-level member whose value is v: back from
// the value over its key to the comma before it (or to just after the opening brace, and then on over the
// comma after the value).
func deletedMember(body []byte, v gjson.Result) (from, to int) {
	from, to = v.Index, v.Index+len(v.Raw)
	keepFrom, delNextComma := deleteTailItem(body[:v.Index])
	from = keepFrom
	if delNextComma {
		for i := to; i < len(body); i++ {
			if body[i] <= ' ' {
				continue
			}
			if body[i] == ',' {
				to = i + 1
			}
			break
		}
	}
	return from, to
}

// deleteTailItem is sjson's (v1.2.10) search back from a value for the start of its member: it returns
// the length of the prefix that stays, and whether the comma after the value must go too.
func deleteTailItem(buf []byte) (int, bool) {
loop:
	for i := len(buf) - 1; i >= 0; i-- {
		switch buf[i] {
		case '[':
			return len(buf), true
		case ',':
			return i, false
		case ':':
			i--
			for ; i >= 0; i-- {
				if buf[i] == '"' {
					i--
					for ; i >= 0; i-- {
						if buf[i] == '"' {
							i--
							if i >= 0 && buf[i] == '\\' {
								continue
							}
							for ; i >= 0; i-- {
								switch buf[i] {
								case '{':
									return i + 1, true
								case ',':
									return i, false
								}
							}
						}
					}
					break
				}
			}
			break loop
		}
	}
	return len(buf), false
}

// AppendedMember is where sjson.SetRawBytes writes a top-level member that body lacks: `,"key":value` just
// before the closing brace. ok is false where sjson would write otherwise or change other bytes (an empty
// object takes no comma; whitespace before or after the object is dropped): cases left to sjson.
func AppendedMember(body []byte) (at int, ok bool) {
	n := len(body)
	if n < 2 || body[0] != '{' || body[n-1] != '}' {
		return 0, false
	}
	for _, c := range body[1 : n-1] {
		if c > ' ' {
			return n - 1, true
		}
	}
	return 0, false
}

// SetSplice is the Splice that sets the top-level member whose value is v (gjson's result for its key on
// body) as sjson.SetRawBytes does: over the value in place, or, when the member is absent (appended), as
// `,"key":value` before the closing brace. own is the Splice's Own: the caller writes the value (and, when
// appended, the `,"key":` before it). ok is false where sjson would write otherwise (see AppendedMember; a
// value at offset 0 is not located).
func SetSplice(body []byte, v gjson.Result, own int) (e Splice, appended, ok bool) {
	if !v.Exists() {
		at, ok := AppendedMember(body)
		return Splice{From: at, To: at, Own: own}, true, ok
	}
	if v.Index <= 0 {
		return Splice{}, false, false
	}
	return Splice{From: v.Index, To: v.Index + len(v.Raw), Own: own}, false, true
}

// ToolsSplice is the Splice that filters the tools array arr to the kept entries (KeptTools), as FilterTools
// does when some entry stays. ok is false where FilterTools does more than replace the array (no entry
// stays: the array goes with its companions) or the array is not located.
func ToolsSplice(arr gjson.Result, kept []policy.Tool, name func(gjson.Result) (n string, shared bool)) (e Splice, ok bool) {
	tools, n := KeptTools(arr, kept, name)
	if n == 0 || arr.Index <= 0 {
		return Splice{}, false
	}
	return Splice{From: arr.Index, To: arr.Index + len(arr.Raw), With: tools}, true
}
