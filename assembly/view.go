package assembly

import (
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// Get is gjson.GetBytes without its copy of the result: the result's Raw and Str share body's
// memory. gjson.GetBytes copies every result, so that reading an 8 KB messages array costs an 8 KB
// allocation, once per read. The sharing is safe here because no body this package reads is ever
// written to: request bodies are read once and kept as they are, and every edit (sjson, the
// splices) makes a new slice. A result must not be kept past a write to its body.
func Get(body []byte, path string) gjson.Result {
	return gjson.Get(unsafe.String(unsafe.SliceData(body), len(body)), path)
}

// Parse is gjson.ParseBytes without its copy of body: the result shares body's memory, as Get's
// does.
func Parse(body []byte) gjson.Result {
	return gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body)))
}

// GetEach sets vals[i] to Get(body, keys[i]) for each plain key (no dot, wildcard or other path
// syntax) with one walk over the top-level members of body, a valid JSON object (as every body
// promptgate writes is), where Get walks them again for each key. The walk only finds where each
// value ends: a string is not unescaped, nor a number read, unless its key is asked for. Like
// Get's, the results share body's memory. On a body it cannot follow, it asks Get, key by key.
func GetEach(body []byte, keys []string, vals []gjson.Result) {
	clear(vals)
	s := unsafe.String(unsafe.SliceData(body), len(body))
	if !getEach(s, keys, vals) {
		for i, k := range keys {
			vals[i] = Get(body, k)
		}
	}
}

// getEach is GetEach's walk; false when s is not an object it can follow.
func getEach(s string, keys []string, vals []gjson.Result) bool {
	i := skipWS(s, 0)
	if i >= len(s) || s[i] != '{' {
		return false
	}
	if i = skipWS(s, i+1); i < len(s) && s[i] == '}' {
		return true
	}
	for left := len(keys); left > 0; {
		if i >= len(s) || s[i] != '"' {
			return false
		}
		kEnd := stringEnd(s, i)
		if kEnd < 0 {
			return false
		}
		key := s[i+1 : kEnd-1]
		if strings.IndexByte(key, '\\') >= 0 {
			key = gjson.Parse(s[i:kEnd]).Str
		}
		if i = skipWS(s, kEnd); i >= len(s) || s[i] != ':' {
			return false
		}
		i = skipWS(s, i+1)
		vEnd := valueEnd(s, i)
		if vEnd < 0 {
			return false
		}
		for j, k := range keys {
			if k == key && !vals[j].Exists() {
				vals[j] = gjson.Parse(s[i:vEnd])
				vals[j].Index = i
				left--
			}
		}
		if i = skipWS(s, vEnd); i >= len(s) {
			return false
		}
		switch s[i] {
		case ',':
			i = skipWS(s, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
	return true
}

// stringEnd is the offset just past the JSON string that starts at s[i] (its opening quote), or -1.
func stringEnd(s string, i int) int {
	for j := i + 1; ; {
		k := strings.IndexByte(s[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		// The quote ends the string unless an odd number of backslashes escapes it.
		n := 0
		for n < j-i-1 && s[j-1-n] == '\\' {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// valueEnd is the offset just past the JSON value that starts at s[i], a valid one, or -1.
func valueEnd(s string, i int) int {
	if i >= len(s) {
		return -1
	}
	switch s[i] {
	case '"':
		return stringEnd(s, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"':
				if j = stringEnd(s, j); j < 0 {
					return -1
				}
				j--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(s) && !strings.ContainsRune(",}] \t\r\n", rune(s[j])) {
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// Body is a request body whose top-level members, and the members of its "promptgate" object, were
// located by one walk over it, for every function that reads the body to share: looking each key up
// with gjson.Get would walk the body again, all of it for a key the body does not have. The walk
// skips each value once, with gjson.
//
// A Body answers as gjson.Get does on the body (the first member of a name wins, keys are compared
// unescaped, values share the body's memory as get's do), for any body that passed
// jsoncheck.Object, as every request body has when the proxy reads it. On a body the walk cannot
// follow it asks gjson, key by key.
type Body struct {
	raw []byte
	// ok is false when the walk did not follow the body; get and extension then ask gjson.
	ok  bool
	top []member
	// ext are the members of the first "promptgate" member's value, when that is an object.
	ext []member
	buf [12]member
	// roles memoizes Roles: the surface reads its messages when it parses the request and again
	// when it rewrites it.
	roles      Roles
	rolesErr   error
	rolesField string
	rolesRead  bool
	others     [16]string // room for the Others of the first field read, in most conversations
}

// member is one member of an object: its key, unescaped, its value as gjson.Get would give it, and
// where the member starts (its key's opening quote).
type member struct {
	key   string
	val   gjson.Result
	start int
}

// NewBody locates raw's top-level members. raw must not be written to while the Body is in use.
func NewBody(raw []byte) *Body {
	b := &Body{raw: raw}
	b.top = b.buf[:0:7] // a request's own members, usually; more make top grow on the heap
	b.ext = b.buf[7:7]  // the five promptgate keys
	s := unsafe.String(unsafe.SliceData(raw), len(raw))
	i := skipWS(s, 0)
	if i < len(s) && s[i] == '{' {
		_, b.ok = b.object(s, i, &b.top, true)
	}
	return b
}

// NewBodyOf is NewBody without the walk: m is where jsoncheck.ObjectMembers found raw's members,
// told PathExtension as the inner member, on this very raw (which it accepted). The validation has
// located every member already, so no value is skipped a second time.
func NewBodyOf(raw []byte, m *jsoncheck.Members) *Body {
	b := &Body{raw: raw, ok: true}
	s := unsafe.String(unsafe.SliceData(raw), len(raw))
	b.top = b.buf[:0:7]
	b.ext = b.buf[7:7]
	b.top = appendMembers(b.top, s, m.Top)
	b.ext = appendMembers(b.ext, s, m.Inner)
	return b
}

// appendMembers appends the members ms of s as a walk would have read them.
func appendMembers(out []member, s string, ms []jsoncheck.Member) []member {
	for _, m := range ms {
		k := s[m.KeyStart:m.KeyEnd]
		if m.KeyEscaped {
			k = gjson.Parse(s[m.KeyStart-1 : m.KeyEnd+1]).Str
		}
		v := gjson.Parse(s[m.ValueStart:m.ValueEnd])
		v.Index = m.ValueStart
		out = append(out, member{key: k, val: v, start: m.KeyStart - 1})
	}
	return out
}

// Raw is the body's bytes.
func (b *Body) Raw() []byte { return b.raw }

// Get is the value of the first top-level member named key, or a Result that does not exist.
func (b *Body) Get(key string) gjson.Result {
	if !b.ok {
		return Get(b.raw, key)
	}
	for _, m := range b.top {
		if m.key == key {
			return m.val
		}
	}
	return gjson.Result{}
}

// Roles is ReadRoles of the top-level member field, read once per Body: a second call for the same
// field answers from the first. Like the rest of Body, it is for one goroutine at a time.
func (b *Body) Roles(field string) (Roles, error) {
	if !b.rolesRead || b.rolesField != field {
		var others []string
		if !b.rolesRead { // the first read may use b.others: no earlier result shares them
			others = b.others[:0]
		}
		b.roles, b.rolesErr = ReadRoles(b.Get(field), field, others)
		b.rolesField, b.rolesRead = field, true
	}
	return b.roles, b.rolesErr
}

// extension calls f for each member of the "promptgate" object in order, as gjson's ForEach on ext
// would; ext is b.Get(PathExtension).
func (b *Body) extension(ext gjson.Result, f func(k string, v gjson.Result) bool) {
	if !b.ok {
		ext.ForEach(func(k, v gjson.Result) bool { return f(k.Str, v) })
		return
	}
	for _, m := range b.ext {
		if !f(m.key, m.val) {
			return
		}
	}
}

// object walks the object whose '{' is s[i], appends its members to out, and returns the offset
// after its '}'. Each value is read by valueAt, but for the first "promptgate" member of the top
// level (top), whose members are walked in turn into b.ext. ok is false where the walk cannot
// follow the body, which is never for a body jsoncheck.Object accepts.
func (b *Body) object(s string, i int, out *[]member, top bool) (end int, ok bool) {
	i = skipWS(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1, true
	}
	extSeen := false
	for {
		if i >= len(s) || s[i] != '"' {
			return i, false
		}
		k := valueAt(s, i)
		if k.Type != gjson.String {
			return i, false
		}
		start := i
		i = skipWS(s, i+len(k.Raw))
		if i >= len(s) || s[i] != ':' {
			return i, false
		}
		if i = skipWS(s, i+1); i >= len(s) {
			return i, false
		}
		var v gjson.Result
		if top && !extSeen && k.Str == PathExtension && s[i] == '{' {
			extSeen = true
			e, ok := b.object(s, i, &b.ext, false)
			if !ok {
				return e, false
			}
			v = gjson.Result{Type: gjson.JSON, Raw: s[i:e], Index: i}
		} else if v = valueAt(s, i); !v.Exists() {
			return i, false
		}
		extSeen = extSeen || (top && k.Str == PathExtension)
		*out = append(*out, member{key: k.Str, val: v, start: start})
		if i = skipWS(s, i+len(v.Raw)); i >= len(s) {
			return i, false
		}
		switch s[i] {
		case ',':
			i = skipWS(s, i+1)
		case '}':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// valueAt is the JSON value that starts at s[i], read by gjson as gjson.Get reads a member's value
// (a nested object or array is skipped with its squash), with its Index in s. The path "..0" is the
// first value of JSON Lines: the value at the start of s[i:], and nothing after it is read.
func valueAt(s string, i int) gjson.Result {
	v := gjson.Get(s[i:], "..0")
	if v.Exists() {
		if v.Index != 0 {
			return gjson.Result{} // not at s[i]: never for a valid body
		}
		v.Index = i
	}
	return v
}

// skipWS is the offset of the first byte at or after i that is not JSON whitespace.
func skipWS(s string, i int) int {
	for i < len(s) {
		switch s[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// rawOf is v's raw bytes: a slice of body, capped so that an append cannot write into body, when v
// was read from body by get or a Body; else a copy.
func rawOf(body []byte, v gjson.Result) []byte {
	if end := v.Index + len(v.Raw); v.Index > 0 && end <= len(body) && string(body[v.Index:end]) == v.Raw {
		return body[v.Index:end:end]
	}
	return []byte(v.Raw)
}
