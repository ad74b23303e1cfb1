package jsoncheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzObject checks Object against encoding/json as an oracle: Object never accepts what
// json.Valid refuses, and whatever it accepts decodes without duplicate keys and within the
// depth limit. The reverse direction for the extra rules (duplicates, depth) is checked too.
func FuzzObject(f *testing.F) {
	for _, c := range checkCases {
		f.Add([]byte(c.in), uint8(0))
	}
	f.Add([]byte(`{"a":[[[1]]]}`), uint8(3))
	f.Add([]byte(`{"a":{"b":{}}}`), uint8(2))
	f.Add([]byte(`{"\u0061":{"b":1,"\u0063":"x"},"c":[{"a":{}}],"d":{"a":{"e":2}}}`), uint8(0))
	f.Add([]byte(`{"b":"\u00e9","a":[{"x":1}]}`), uint8(0))
	f.Fuzz(func(t *testing.T, b []byte, depth uint8) {
		l := Limits{MaxDepth: int(depth % 80)}
		limit := l.MaxDepth
		if limit == 0 {
			limit = DefaultMaxDepth
		}
		err := Object(b, l)
		valueErr := Value(b, l)
		valid := json.Valid(b)
		if !valid && err == nil {
			t.Fatalf("Object accepted what json.Valid refuses: %q", b)
		}
		if !valid && valueErr == nil {
			t.Fatalf("Value accepted what json.Valid refuses: %q", b)
		}
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Offset < 0 || e.Offset > len(b) {
				t.Fatalf("bad error %#v", err)
			}
			_ = err.Error()
		}
		if !valid {
			return
		}
		dup, maxDepth, first, oerr := oracle(b)
		if oerr != nil {
			t.Fatalf("oracle failed on json.Valid input %q: %v", b, oerr)
		}
		switch {
		case err == nil:
			if first != '{' {
				t.Fatalf("Object accepted a non-object: %q", b)
			}
			if dup {
				t.Fatalf("Object accepted duplicate keys: %q", b)
			}
			if maxDepth > limit {
				t.Fatalf("Object accepted depth %d > %d: %q", maxDepth, limit, b)
			}
			// Decoding into a map and re-encoding must give an object Object still accepts.
			var m map[string]any
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber()
			if err := d.Decode(&m); err != nil {
				t.Fatalf("accepted input does not decode into map[string]any: %v", err)
			}
			re, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			if err := Object(re, l); err != nil {
				t.Fatalf("re-encoded %q refused: %v", re, err)
			}
		case errors.Is(err, DuplicateKey):
			if !dup {
				t.Fatalf("DuplicateKey but the oracle finds none: %q (%v)", b, err)
			}
		case errors.Is(err, TooDeep):
			if maxDepth <= limit {
				t.Fatalf("TooDeep but depth is %d <= %d: %q", maxDepth, limit, b)
			}
		case errors.Is(err, NotObject):
			if first == '{' {
				t.Fatalf("NotObject for an object: %q", b)
			}
		}
		checkMembers(t, b, l, err)
		// On valid JSON, an accepted Value means an accepted Object when the value is an object.
		if valueErr == nil && first == '{' && err != nil {
			t.Fatalf("Value accepts the object but Object refuses it: %v", err)
		}
	})
}

// checkMembers checks ObjectMembers against Object and encoding/json: the same verdict, and on an
// accepted object, each top-level member (and each member of the object under the key "a") where
// encoding/json finds it: its key decoded and its value's bytes, in order.
func checkMembers(t *testing.T, b []byte, l Limits, objectErr error) {
	t.Helper()
	var m Members
	err := ObjectMembers(b, l, "a", &m)
	if (err == nil) != (objectErr == nil) || (err != nil && err.Error() != objectErr.Error()) {
		t.Fatalf("ObjectMembers says %v where Object says %v: %q", err, objectErr, b)
	}
	if err != nil {
		return
	}
	var inner []Member
	sameAsDecoded(t, b, b, m.Top, func(key string, v []byte) {
		if key == "a" && v[0] == '{' {
			sameAsDecoded(t, b, v, m.Inner, nil)
			inner = m.Inner
		}
	})
	if inner == nil && len(m.Inner) > 0 {
		t.Fatalf("members recorded for no object under \"a\": %+v in %q", m.Inner, b)
	}
}

// sameAsDecoded checks that ms are the members of the object obj (a part of b), as encoding/json
// decodes them, in order, calling each with each member's key and value.
func sameAsDecoded(t *testing.T, b, obj []byte, ms []Member, each func(key string, v []byte)) {
	t.Helper()
	var want map[string]json.RawMessage
	if err := json.Unmarshal(obj, &want); err != nil {
		t.Fatal(err)
	}
	if len(ms) != len(want) {
		t.Fatalf("%d members recorded, %d decoded: %q", len(ms), len(want), obj)
	}
	last := -1
	for _, m := range ms {
		var key string
		if err := json.Unmarshal(b[m.KeyStart-1:m.KeyEnd+1], &key); err != nil || b[m.KeyStart-1] != '"' || b[m.KeyEnd] != '"' {
			t.Fatalf("key span [%d,%d) of %q is not a key: %v", m.KeyStart, m.KeyEnd, b, err)
		}
		if m.KeyEscaped != bytes.ContainsRune(b[m.KeyStart:m.KeyEnd], '\\') {
			t.Fatalf("key %q: KeyEscaped %v", b[m.KeyStart:m.KeyEnd], m.KeyEscaped)
		}
		v := b[m.ValueStart:m.ValueEnd]
		if !bytes.Equal(v, bytes.TrimSpace(want[key])) || m.KeyStart <= last || m.ValueStart < m.KeyEnd {
			t.Fatalf("member %q: value %q recorded, %q decoded (or out of order) in %q", key, v, want[key], b)
		}
		last = m.ValueStart
		if each != nil {
			each(key, v)
		}
	}
}

// oracle walks b (json.Valid) with encoding/json's tokenizer and reports whether any object
// holds a key twice, the nesting depth, and the first byte of the top-level value.
func oracle(b []byte) (dup bool, depth int, first byte, err error) {
	first = b[len(b)-len(bytes.TrimLeft(b, " \t\r\n"))]
	type frame struct {
		obj       bool
		expectKey bool
		keys      map[string]bool
	}
	var stack []*frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].obj {
			stack[n-1].expectKey = true
		}
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return dup, depth, first, nil
		}
		if err != nil {
			return dup, depth, first, err
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if n := len(stack); n > 0 && stack[n-1].obj {
					stack[n-1].expectKey = false
				}
				stack = append(stack, &frame{obj: t == '{', expectKey: t == '{', keys: map[string]bool{}})
				depth = max(depth, len(stack))
			default:
				stack = stack[:len(stack)-1]
				valueDone()
			}
		default:
			if n := len(stack); n > 0 && stack[n-1].obj && stack[n-1].expectKey {
				k := t.(string)
				if stack[n-1].keys[k] {
					dup = true
				}
				stack[n-1].keys[k] = true
				stack[n-1].expectKey = false
				continue
			}
			valueDone()
		}
	}
}

// FuzzStringEnd: StringEnd accepts a string exactly where Value accepts the same bytes as a whole
// value, and ends it where encoding/json's scanner ends it.
func FuzzStringEnd(f *testing.F) {
	for _, s := range []string{`"a"`, `"a\"b",1`, `"\ud83d\ude00"x`, `"\ud83d"`, `"\ude00"`, "\"\x01\"", "\"\xff\"",
		`"\q"`, `"\u12"`, `"abc`, `"é"`, `x"a"`, `""`, `"\\"`, `"\/\b\f\n\r\t"`} {
		f.Add([]byte(s), 0)
	}
	f.Fuzz(func(t *testing.T, b []byte, i int) {
		end, ok := StringEnd(b, i)
		if !ok {
			if i >= 0 && i < len(b) && b[i] == '"' {
				// No valid string starts here: no prefix of the rest is one.
				for j := i + 2; j <= len(b); j++ {
					if Value(b[i:j], Limits{}) == nil {
						t.Fatalf("StringEnd(%q, %d) refused, Value accepts %q", b, i, b[i:j])
					}
				}
			}
			return
		}
		if Value(b[i:end], Limits{}) != nil || !json.Valid(b[i:end]) {
			t.Fatalf("StringEnd(%q, %d) = %d, not a valid string: %q", b, i, end, b[i:end])
		}
		var v string
		if err := json.Unmarshal(b[i:end], &v); err != nil {
			t.Fatalf("encoding/json refuses %q: %v", b[i:end], err)
		}
	})
}
