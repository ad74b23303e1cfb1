package assembly

import (
	"strings"

	"github.com/tidwall/gjson"
)

// EachMember reads the object whose '{' is s[i] member by member, for a reader that goes down into
// some values and skips the others, so that no byte of it is walked twice (gjson's ForEach skips
// every value before it is given, and a reader of a value then walks it again). For each member in
// order, f gets its key, unescaped as gjson gives it, and the offset of its value, and returns the
// offset just past that value: found by reading it (EachMember, EachElement) or by ValueEnd. s must
// be valid JSON (as a body that jsoncheck accepted is); EachMember returns the offset past the '}',
// or -1 where it cannot follow s or f returns -1.
func EachMember(s string, i int, f func(key string, v int) int) int {
	if i < 0 || i >= len(s) || s[i] != '{' {
		return -1
	}
	if i = skipWS(s, i+1); i < len(s) && s[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return -1
		}
		kEnd := stringEnd(s, i)
		if kEnd < 0 {
			return -1
		}
		key := s[i+1 : kEnd-1]
		if strings.IndexByte(key, '\\') >= 0 {
			key = gjson.Parse(s[i:kEnd]).Str
		}
		if i = skipWS(s, kEnd); i >= len(s) || s[i] != ':' {
			return -1
		}
		if i = skipWS(s, i+1); i >= len(s) {
			return -1
		}
		if i = f(key, i); i < 0 {
			return -1
		}
		if i = skipWS(s, i); i >= len(s) {
			return -1
		}
		switch s[i] {
		case ',':
			i = skipWS(s, i+1)
		case '}':
			return i + 1
		default:
			return -1
		}
	}
}

// EachElement is EachMember for the array whose '[' is s[i]: f gets the offset of each element's
// value in order and returns the offset just past it.
func EachElement(s string, i int, f func(v int) int) int {
	if i < 0 || i >= len(s) || s[i] != '[' {
		return -1
	}
	if i = skipWS(s, i+1); i < len(s) && s[i] == ']' {
		return i + 1
	}
	for {
		if i >= len(s) {
			return -1
		}
		if i = f(i); i < 0 {
			return -1
		}
		if i = skipWS(s, i); i >= len(s) {
			return -1
		}
		switch s[i] {
		case ',':
			i = skipWS(s, i+1)
		case ']':
			return i + 1
		default:
			return -1
		}
	}
}

// ValueEnd is the offset just past the JSON value that starts at s[i], a valid one, or -1.
func ValueEnd(s string, i int) int { return valueEnd(s, i) }
