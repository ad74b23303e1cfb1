package ctxjson

import (
	"fmt"
	"iter"
	"strconv"
)

// Kind is the JSON type of a Value.
type Kind uint8

// The kinds of Value. The zero Value is a null.
const (
	KindNull Kind = iota
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

// String returns the JSON name of the kind.
func (k Kind) String() string {
	switch k {
	case KindNull:
		return "null"
	case KindBool:
		return "bool"
	case KindNumber:
		return "number"
	case KindString:
		return "string"
	case KindArray:
		return "array"
	case KindObject:
		return "object"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is one node of an ordered JSON tree. Object keys keep the order in which they were
// parsed or set. A nil *Value encodes as null. Values must form a tree (no cycles); nothing in
// this package mutates a Value it is given, so one Value may be shared by concurrent Builds as
// long as nobody calls Set or Append on it meanwhile.
type Value struct {
	kind  Kind
	truth bool
	text  string   // the string, or the number's JSON text
	size  int      // strings: characters of the encoding, quotes included, when Parse measured it; else 0
	keys  []string // object keys, parallel to items
	items []*Value // array elements or object values
}

// Null returns a JSON null.
func Null() *Value { return &Value{kind: KindNull} }

// Bool returns a JSON true or false.
func Bool(b bool) *Value { return &Value{kind: KindBool, truth: b} }

// Int returns a JSON number.
func Int(n int64) *Value { return &Value{kind: KindNumber, text: strconv.FormatInt(n, 10)} }

// Number returns a JSON number with the given text, which must be an RFC 8259 number.
func Number(text string) (*Value, error) {
	if !validNumber(text) {
		return nil, fmt.Errorf("ctxjson: invalid JSON number %q", text)
	}
	return &Value{kind: KindNumber, text: text}, nil
}

// String returns a JSON string. s may hold any bytes; invalid UTF-8 is encoded as U+FFFD.
func String(s string) *Value { return &Value{kind: KindString, text: s} }

// Array returns a JSON array of the given elements.
func Array(items ...*Value) *Value {
	return &Value{kind: KindArray, items: append([]*Value(nil), items...)}
}

// Object returns an empty JSON object; add fields with Set.
func Object() *Value { return &Value{kind: KindObject} }

// Set sets the field key of object v to val: in place if the key exists, else appended at the
// end. It returns v. Set panics if v is not an object.
func (v *Value) Set(key string, val *Value) *Value {
	if v == nil || v.kind != KindObject {
		panic("ctxjson: Set on a non-object value")
	}
	for i, k := range v.keys {
		if k == key {
			v.items[i] = val
			return v
		}
	}
	v.keys = append(v.keys, key)
	v.items = append(v.items, val)
	return v
}

// Append appends elements to array v and returns v. Append panics if v is not an array.
func (v *Value) Append(items ...*Value) *Value {
	if v == nil || v.kind != KindArray {
		panic("ctxjson: Append on a non-array value")
	}
	v.items = append(v.items, items...)
	return v
}

// Kind returns the kind of v; a nil v is KindNull.
func (v *Value) Kind() Kind {
	if v == nil {
		return KindNull
	}
	return v.kind
}

// Bool reports the value of a KindBool; false for other kinds.
func (v *Value) Bool() bool { return v != nil && v.kind == KindBool && v.truth }

// Text returns the string of a KindString or the JSON text of a KindNumber; "" otherwise.
func (v *Value) Text() string {
	if v == nil || (v.kind != KindString && v.kind != KindNumber) {
		return ""
	}
	return v.text
}

// Len returns the number of elements of an array or fields of an object; 0 otherwise.
func (v *Value) Len() int {
	if v == nil || (v.kind != KindArray && v.kind != KindObject) {
		return 0
	}
	return len(v.items)
}

// Index returns element i of an array, or the value of field i of an object; nil when out of range.
func (v *Value) Index(i int) *Value {
	if i < 0 || i >= v.Len() {
		return nil
	}
	return v.items[i]
}

// Key returns the key of field i of an object; "" when out of range or not an object.
func (v *Value) Key(i int) string {
	if v == nil || v.kind != KindObject || i < 0 || i >= len(v.keys) {
		return ""
	}
	return v.keys[i]
}

// Get returns the value of the field key of an object, or nil.
func (v *Value) Get(key string) *Value {
	if v == nil || v.kind != KindObject {
		return nil
	}
	for i, k := range v.keys {
		if k == key {
			return v.items[i]
		}
	}
	return nil
}

// Fields iterates over the fields of an object in order.
func (v *Value) Fields() iter.Seq2[string, *Value] {
	return func(yield func(string, *Value) bool) {
		if v == nil || v.kind != KindObject {
			return
		}
		for i, k := range v.keys {
			if !yield(k, v.items[i]) {
				return
			}
		}
	}
}

// Elems iterates over the elements of an array in order.
func (v *Value) Elems() iter.Seq2[int, *Value] {
	return func(yield func(int, *Value) bool) {
		if v == nil || v.kind != KindArray {
			return
		}
		for i, e := range v.items {
			if !yield(i, e) {
				return
			}
		}
	}
}

// validNumber reports whether s is exactly one RFC 8259 number.
func validNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i++; i < len(s) && isDigit(s[i]); i++ {
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for ; i < len(s) && isDigit(s[i]); i++ {
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || !isDigit(s[i]) {
			return false
		}
		for ; i < len(s) && isDigit(s[i]); i++ {
		}
	}
	return i == len(s)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
