package assembly

import (
	"errors"
	"slices"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy"
)

// MemberEdit is what a surface's rewrite makes of one top-level member of a request body: its new
// value, or its removal. Every rewrite is a list of these, made by one executor (Body.Apply).
type MemberEdit struct {
	Key string
	// Delete removes the member; nothing happens when the body lacks it.
	Delete bool
	// Raw is the member's new value as JSON text. Write, when set instead, appends the value to dst
	// (a value written straight into the new body); Size is about how many bytes it appends.
	Raw   []byte
	Write func(dst []byte) []byte
	Size  int
}

// errNotWalked is Apply's refusal of a body whose members the walk could not locate, which is never
// the case for a body jsoncheck.Object accepted (every request body).
var errNotWalked = errors.New("assembly: the body's members could not be located")

// Apply makes edits in one new body, in one pass: a member named by an edit is replaced in place
// (its key and the bytes around it kept) or removed with one separating comma; a member the body
// lacks gets its value appended as the last member; every other byte stays as the client sent it.
// Edits of one key after the first are ignored.
func (b *Body) Apply(edits []MemberEdit) ([]byte, error) {
	if !b.ok {
		return nil, errNotWalked
	}
	raw := b.raw
	out := make([]byte, 0, b.applySize(edits))
	var room [8]bool
	done := room[:0]
	if len(edits) > len(room) {
		done = make([]bool, len(edits))
	}
	done = done[:len(edits)]
	// Each kept member is written with the separator that came before it in the body (none before
	// the first one kept); the tail after the body's last member (white space and the closing
	// brace) ends the object.
	if len(b.top) == 0 {
		open := slices.Index(raw, '{')
		out = append(out, raw[:open+1]...)
		out = appendNew(out, edits, done, true)
		return append(out, raw[open+1:]...), nil
	}
	out = append(out, raw[:b.top[0].start]...)
	lastKept := -1 // the index of the last member written
	for i, m := range b.top {
		var e *MemberEdit
		if j := slices.IndexFunc(edits, func(e MemberEdit) bool { return e.Key == m.key }); j >= 0 && !done[j] {
			e, done[j] = &edits[j], true
		}
		if e != nil && e.Delete {
			continue
		}
		if lastKept >= 0 {
			out = append(out, b.separator(lastKept, i)...)
		}
		lastKept = i
		if e == nil {
			out = append(out, raw[m.start:m.val.Index+len(m.val.Raw)]...)
			continue
		}
		out = append(out, raw[m.start:m.val.Index]...)
		out = e.value(out)
	}
	if lastKept >= 0 && lastKept < len(b.top)-1 {
		out = append(out, b.beforeComma(lastKept)...) // the members after the last one kept went
	}
	out = appendNew(out, edits, done, lastKept < 0)
	last := b.top[len(b.top)-1]
	return append(out, raw[last.val.Index+len(last.val.Raw):]...), nil
}

// applySize is the room Apply's body takes: the body's, less the values that edits replace or
// remove (the first member of each edit's key), plus each edit's new member.
func (b *Body) applySize(edits []MemberEdit) int {
	size := len(b.raw)
	for i, e := range edits {
		size += len(e.Raw) + e.Size + len(e.Key) + 4
		if slices.ContainsFunc(edits[:i], func(f MemberEdit) bool { return f.Key == e.Key }) {
			continue // an edit of a key after the first is ignored
		}
		for _, m := range b.top {
			if m.key == e.Key {
				size -= len(m.val.Raw)
				break
			}
		}
	}
	return size
}

// separator is what goes between member k, written, and member i after it: the bytes between them
// in the body, or, when the members between them went, the white space after k up to its comma and
// the separator that came before i.
func (b *Body) separator(k, i int) []byte {
	prevEnd := b.top[i-1].val.Index + len(b.top[i-1].val.Raw)
	sep := b.raw[prevEnd:b.top[i].start]
	if k == i-1 {
		return sep
	}
	return append(slices.Clip(b.beforeComma(k)), sep...)
}

// beforeComma is the white space between member k's value and the comma after it.
func (b *Body) beforeComma(k int) []byte {
	end := b.top[k].val.Index + len(b.top[k].val.Raw)
	i := end
	for i < len(b.raw) && b.raw[i] != ',' {
		i++
	}
	return b.raw[end:i]
}

// appendNew appends the members of the edits not yet made (keys the body lacks), each after a comma
// unless it is the object's first.
func appendNew(out []byte, edits []MemberEdit, done []bool, first bool) []byte {
	for i := range edits {
		e := &edits[i]
		if done[i] || e.Delete || slices.ContainsFunc(edits[:i], func(o MemberEdit) bool { return o.Key == e.Key }) {
			continue
		}
		done[i] = true
		if !first {
			out = append(out, ',')
		}
		first = false
		out = AppendJSONString(out, e.Key)
		out = append(out, ':')
		out = e.value(out)
	}
	return out
}

// value appends the edit's value.
func (e *MemberEdit) value(dst []byte) []byte {
	if e.Write != nil {
		return e.Write(dst)
	}
	return append(dst, e.Raw...)
}

// ToolsEdits are the edits that filter the tools array at key to the kept entries (KeptTools): the
// array replaced, or, when no entry stays, removed with deps (tool_choice and the like, which the
// APIs only accept alongside tools). None when the body has no such array.
func ToolsEdits(b *Body, key string, kept []policy.Tool, name func(gjson.Result) (n string, shared bool), deps ...string) []MemberEdit {
	arr := b.Get(key)
	if !arr.IsArray() {
		return nil
	}
	tools, n := KeptTools(arr, kept, name)
	if n > 0 {
		return []MemberEdit{{Key: key, Raw: tools}}
	}
	out := []MemberEdit{{Key: key, Delete: true}}
	for _, d := range deps {
		out = append(out, MemberEdit{Key: d, Delete: true})
	}
	return out
}
