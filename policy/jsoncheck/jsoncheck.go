// Package jsoncheck validates JSON bytes that come from outside the process: request bodies and
// the argument strings of tool calls. It answers one question, "is this exactly one strict JSON
// value (or object) we are willing to pass on", in a single pass and, for typical inputs, without
// allocating.
//
// The check is stricter than encoding/json.Valid: RFC 8259 grammar exactly, valid UTF-8 everywhere
// (including \u escapes: a lone surrogate such as "\ud800" is an error), no duplicate keys in any
// object at any depth (keys are compared after decoding escapes), and a nesting limit. On request
// (Limits.FoldedKeys) it also refuses two keys of one object that differ only in letter case.
//
// It owns validation, and the exact reading of a number literal (Number) that every judge of a
// number shares. It does not decode objects, build trees, apply schemas or policy rules (see
// policy/vet and the proxy stages), and it does not turn errors into HTTP responses (the proxy's
// edge maps every error from this package to 400 invalid_json).
package jsoncheck

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"math"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// DefaultMaxDepth is the nesting limit used when Limits.MaxDepth is zero.
const DefaultMaxDepth = 64

// smallKeys is how many keys of one object are checked for duplicates by a linear scan over a
// stack-allocated array; objects with more keys switch to a map.
const smallKeys = 16

// Limits bounds what Object and Value accept.
type Limits struct {
	// MaxDepth is the deepest nesting of objects and arrays allowed: {} and [] are depth 1,
	// {"a":[1]} is depth 2, a scalar is depth 0. Zero or negative means DefaultMaxDepth.
	MaxDepth int
	// FoldedKeys also refuses two keys of one object that are equal under Unicode simple case
	// folding, as strings.EqualFold compares them ("to" and "To", "k" and the Kelvin sign "K", "s"
	// and "ſ"), with CaseVariantKey: decoders that match keys to fields case-insensitively
	// (encoding/json into a struct) give such a field the last of them, not the one an exact reader
	// sees. Keys are compared after decoding escapes.
	FoldedKeys bool
	// Float64Numbers also refuses, with NumberRange, a number that a float64 cannot hold: one that
	// reads as an infinity (encoding/json refuses it, JavaScript reads Infinity, an exact reader a
	// huge value) or as zero while its digits are not all zero (exact readers and float64 readers
	// then compare it differently, and reading its exponent exactly costs time in its size).
	Float64Numbers bool
}

// Object checks that b is exactly one JSON object: leading and trailing JSON whitespace (space,
// tab, LF, CR) are allowed, nothing else is (no byte order mark, no second value). It returns
// nil or an *Error. It does not retain b.
//
// A top-level value that starts like an array, string, number or literal is reported as
// NotObject at once, without reading the rest of it.
func Object(b []byte, l Limits) error {
	return check(b, l, true)
}

// Member is where one member of an object is in the checked input.
type Member struct {
	// KeyStart and KeyEnd bound the key's text between its quotes; KeyEscaped says it holds an
	// escape.
	KeyStart, KeyEnd int
	KeyEscaped       bool
	// ValueStart and ValueEnd bound the member's value.
	ValueStart, ValueEnd int
}

// Members is where ObjectMembers found the members of the object it checked, for a caller that
// reads them next and would otherwise walk the input again to find them.
type Members struct {
	// Top are the top-level object's members, in order.
	Top []Member
	// Inner are the members of the value of the top-level member named as ObjectMembers was told,
	// when that value is an object; in order.
	Inner []Member
	// FoldableKey is set when some key, at any depth, holds an escape, an ASCII capital or a
	// non-ASCII byte: false says that every key is lowercase ASCII as written. ObjectMembers sets
	// it, never clears it.
	FoldableKey bool
}

// ObjectMembers is Object that also appends to m.Top the members of the top-level object, and to
// m.Inner the members of the object that is the value of its member named inner (keys compared
// decoded). On an error, m holds what was found before it.
func ObjectMembers(b []byte, l Limits, inner string, m *Members) error {
	return checkInto(b, l, true, m, inner)
}

// Value is Object for any single JSON value (object, array, string, number, true, false, null).
func Value(b []byte, l Limits) error {
	return check(b, l, false)
}

type scanner struct {
	b       []byte
	rec     *Members  // where ObjectMembers records members, or nil
	inner   string    // the top-level member whose object's members go to rec.Inner
	next    *[]Member // where the object about to be scanned records its members, or nil
	max     int
	scratch []byte // decoded escaped keys, only for objects with more than smallKeys keys
	seed    maphash.Seed
	seeded  bool
	free    []*keySet // key sets of closed large objects, for reuse
	fold    bool      // Limits.FoldedKeys
	float   bool      // Limits.Float64Numbers
}

// key locates the raw text of an object key, between its quotes.
type key struct {
	start, end int
	escaped    bool
}

func check(b []byte, l Limits, wantObject bool) error {
	return checkInto(b, l, wantObject, nil, "")
}

func checkInto(b []byte, l Limits, wantObject bool, rec *Members, inner string) error {
	s := scanner{b: b, max: l.MaxDepth, rec: rec, inner: inner, fold: l.FoldedKeys, float: l.Float64Numbers}
	if s.max <= 0 {
		s.max = DefaultMaxDepth
	}
	i := s.skipWS(0)
	if i == len(b) {
		if len(b) == 0 {
			return s.fail(Syntax, 0, "empty input")
		}
		return s.fail(Syntax, i, "no value, only whitespace")
	}
	if wantObject && b[i] != '{' {
		if kind := startKind(b[i]); kind != "" {
			return s.fail(NotObject, i, "top-level value is "+kind)
		}
	}
	if rec != nil {
		s.next = &rec.Top
	}
	i, err := s.value(i, 0)
	if err != nil {
		return err
	}
	if i = s.skipWS(i); i != len(b) {
		return s.unexpected(i, "after top-level value")
	}
	return nil
}

// foldable reports whether a key's raw text holds an ASCII capital or a non-ASCII byte.
func foldable(k []byte) bool {
	for _, c := range k {
		if c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}

// startKind names the kind of value that starts with c, or "" if none does.
func startKind(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '{':
		return "an object"
	}
	return ""
}

func (s *scanner) skipWS(i int) int {
	for i < len(s.b) {
		switch s.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value checks the value starting at s.b[i] (i < len(s.b)) at the given depth and returns the
// offset just after it.
func (s *scanner) value(i, depth int) (int, *Error) {
	switch c := s.b[i]; c {
	case '{':
		return s.object(i, depth+1)
	case '[':
		return s.array(i, depth+1)
	case '"':
		j, _, err := s.str(i)
		return j, err
	case 't':
		return s.literal(i, "true")
	case 'f':
		return s.literal(i, "false")
	case 'n':
		return s.literal(i, "null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return s.number(i)
		}
		return i, s.unexpected(i, "looking for a value")
	}
}

func (s *scanner) object(i, depth int) (int, *Error) {
	out := s.next // nil but for the objects whose members ObjectMembers records
	s.next = nil
	if depth > s.max {
		return i, s.tooDeep(i)
	}
	b := s.b
	i = s.skipWS(i + 1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	var (
		small [smallKeys]key
		n     int
		big   *keySet
	)
	for {
		if i >= len(b) {
			return i, s.fail(Syntax, i, "unexpected end of input, expected object key")
		}
		if b[i] != '"' {
			return i, s.unexpected(i, "looking for an object key")
		}
		start := i
		j, escaped, err := s.str(i)
		if err != nil {
			return j, err
		}
		k := key{start: start + 1, end: j - 1, escaped: escaped}
		if s.rec != nil && !s.rec.FoldableKey {
			s.rec.FoldableKey = escaped || foldable(b[k.start:k.end])
		}
		if big == nil {
			for x := 0; x < n; x++ {
				if s.sameKey(small[x], k) {
					return start, s.clash(start, small[x], k)
				}
			}
			if n < len(small) {
				small[n] = k
				n++
			} else {
				big = s.takeSet()
				for _, sk := range small {
					s.add(big, sk)
				}
				s.add(big, k)
			}
		} else if old, found := s.add(big, k); found {
			return start, s.clash(start, old, k)
		}
		i = s.skipWS(j)
		if i >= len(b) {
			return i, s.fail(Syntax, i, "unexpected end of input, expected ':' after object key")
		}
		if b[i] != ':' {
			return i, s.unexpected(i, "after object key, expected ':'")
		}
		if i = s.skipWS(i + 1); i >= len(b) {
			return i, s.fail(Syntax, i, "unexpected end of input, expected object value")
		}
		if out != nil && out == &s.rec.Top && b[i] == '{' && string(s.decodeKey(k)) == s.inner {
			s.next = &s.rec.Inner
		}
		v := i
		if i, err = s.value(i, depth); err != nil {
			return i, err
		}
		s.next = nil
		if out != nil {
			*out = append(*out, Member{KeyStart: k.start, KeyEnd: k.end, KeyEscaped: k.escaped, ValueStart: v, ValueEnd: i})
		}
		if i = s.skipWS(i); i >= len(b) {
			return i, s.fail(Syntax, i, "unexpected end of input, expected ',' or '}'")
		}
		switch b[i] {
		case ',':
			i = s.skipWS(i + 1)
		case '}':
			if big != nil {
				s.putSet(big)
			}
			return i + 1, nil
		default:
			return i, s.unexpected(i, "after object value, expected ',' or '}'")
		}
	}
}

func (s *scanner) array(i, depth int) (int, *Error) {
	if depth > s.max {
		return i, s.tooDeep(i)
	}
	b := s.b
	i = s.skipWS(i + 1)
	if i < len(b) && b[i] == ']' {
		return i + 1, nil
	}
	for {
		if i >= len(b) {
			return i, s.fail(Syntax, i, "unexpected end of input, expected array element")
		}
		var err *Error
		if i, err = s.value(i, depth); err != nil {
			return i, err
		}
		if i = s.skipWS(i); i >= len(b) {
			return i, s.fail(Syntax, i, "unexpected end of input, expected ',' or ']'")
		}
		switch b[i] {
		case ',':
			i = s.skipWS(i + 1)
		case ']':
			return i + 1, nil
		default:
			return i, s.unexpected(i, "after array element, expected ',' or ']'")
		}
	}
}

func (s *scanner) literal(i int, lit string) (int, *Error) {
	if len(s.b)-i < len(lit) || string(s.b[i:i+len(lit)]) != lit {
		return i, s.fail(Syntax, i, "invalid literal, expected "+lit)
	}
	return i + len(lit), nil
}

func (s *scanner) number(i int) (int, *Error) {
	b := s.b
	start := i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return i, s.fail(Syntax, start, "invalid number, expected a digit")
	}
	if i < len(b) && b[i] == '.' {
		if i+1 >= len(b) || b[i+1] < '0' || b[i+1] > '9' {
			return i, s.fail(Syntax, start, "invalid number, expected a digit after '.'")
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, s.fail(Syntax, start, "invalid number, expected a digit in the exponent")
		}
		i = digits(b, i)
	}
	if s.float && !fitsFloat64(b[start:i]) {
		return i, s.fail(NumberRange, start, "number beyond what a float64 holds")
	}
	return i, nil
}

// fitsFloat64 reports whether a valid JSON number reads as a finite float64 that is zero only when
// its digits are, and an exact reader can read it. Short numbers without an exponent always do.
func fitsFloat64(n []byte) bool {
	if len(n) <= 300 && bytes.IndexAny(n, "eE") < 0 {
		return true
	}
	f, _ := strconv.ParseFloat(string(n), 64)
	if math.IsInf(f, 0) {
		return false
	}
	if f != 0 {
		return true
	}
	mantissa, exp := n, "0"
	if i := bytes.IndexAny(n, "eE"); i >= 0 {
		mantissa, exp = n[:i], string(n[i+1:])
	}
	// A zero: exact readers (big.Rat) refuse an exponent beyond int64.
	_, err := strconv.ParseInt(exp, 10, 64)
	return len(bytes.Trim(mantissa, "-0.")) == 0 && err == nil
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// special8 reports whether any of the 8 bytes in x (little endian) needs a closer look inside a
// string: a byte >= 0x80, < 0x20, '"' or '\\'. With every byte below 0x80, each subtraction
// below borrows (sets a high bit) exactly when some byte is below the bound, so the test is exact.
func special8(x uint64) bool {
	return (x|(x-0x20*ones)|((x^('"'*ones))-ones)|((x^('\\'*ones))-ones))&highs != 0
}

// str checks the string starting at s.b[i] == '"' and returns the offset after its closing
// quote and whether it held any escape.
func (s *scanner) str(i int) (int, bool, *Error) {
	b := s.b
	start := i
	escaped := false
	i++
	for {
		for i+8 <= len(b) && !special8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		for i < len(b) {
			if c := b[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' {
				break
			}
			i++
		}
		if i >= len(b) {
			return i, escaped, s.fail(Syntax, start, "unterminated string")
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, escaped, nil
		case c == '\\':
			escaped = true
			j, err := s.escape(i)
			if err != nil {
				return j, escaped, err
			}
			i = j
		case c < 0x20:
			return i, escaped, s.fail(Syntax, i, "raw control character in string")
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return i, escaped, s.fail(InvalidUTF8, i, "")
			}
			i += size
		}
	}
}

// escape checks the escape sequence at s.b[i] == '\\' and returns the offset after it.
func (s *scanner) escape(i int) (int, *Error) {
	b := s.b
	if i+1 >= len(b) {
		return i, s.fail(Syntax, i, "unterminated string")
	}
	switch b[i+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return i + 2, nil
	case 'u':
		r, ok := Hex4(b, i+2)
		if !ok {
			return i, s.fail(Syntax, i, "invalid \\u escape, expected 4 hex digits")
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return i, s.fail(InvalidUTF8, i, "lone low surrogate escape")
		case r >= 0xD800 && r <= 0xDBFF:
			if i+7 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
				return i, s.fail(InvalidUTF8, i, "lone high surrogate escape")
			}
			r2, ok := Hex4(b, i+8)
			if !ok {
				return i + 6, s.fail(Syntax, i+6, "invalid \\u escape, expected 4 hex digits")
			}
			if r2 < 0xDC00 || r2 > 0xDFFF {
				return i, s.fail(InvalidUTF8, i, "high surrogate escape not followed by a low surrogate")
			}
			return i + 12, nil
		}
		return i + 6, nil
	default:
		return i, s.fail(Syntax, i, "invalid escape character")
	}
}

// Hex4 decodes the 4 hex digits of a \uXXXX escape at b[i:] (bytes or a string); false when they
// are not all there.
func Hex4[T ~string | ~[]byte](b T, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	var r rune
	for j := i; j < i+4; j++ {
		c := b[j]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// next decodes one character of a checked string's raw text at raw[i] and returns it and the
// offset after it.
func next(raw []byte, i int) (rune, int) {
	c := raw[i]
	if c < 0x80 && c != '\\' {
		return rune(c), i + 1
	}
	if c != '\\' {
		r, size := utf8.DecodeRune(raw[i:])
		return r, i + size
	}
	switch raw[i+1] {
	case 'b':
		return '\b', i + 2
	case 'f':
		return '\f', i + 2
	case 'n':
		return '\n', i + 2
	case 'r':
		return '\r', i + 2
	case 't':
		return '\t', i + 2
	case 'u':
		r, _ := Hex4(raw, i+2)
		if utf16.IsSurrogate(r) {
			r2, _ := Hex4(raw, i+8)
			return utf16.DecodeRune(r, r2), i + 12
		}
		return r, i + 6
	default: // '"', '\\', '/'
		return rune(raw[i+1]), i + 2
	}
}

// keyEqual compares two checked keys after decoding their escapes, without allocating.
func (s *scanner) keyEqual(a, b key) bool {
	ra, rb := s.b[a.start:a.end], s.b[b.start:b.end]
	if !a.escaped && !b.escaped {
		return bytes.Equal(ra, rb)
	}
	i, j := 0, 0
	for i < len(ra) && j < len(rb) {
		var x, y rune
		x, i = next(ra, i)
		y, j = next(rb, j)
		if x != y {
			return false
		}
	}
	return i == len(ra) && j == len(rb)
}

// sameKey reports whether two checked keys are one key: equal after decoding escapes or, with
// Limits.FoldedKeys, equal under simple case folding.
func (s *scanner) sameKey(a, b key) bool {
	if s.fold {
		return s.keyEqualFold(a, b)
	}
	return s.keyEqual(a, b)
}

// keyEqualFold is strings.EqualFold of two checked keys after decoding their escapes, without
// allocating.
func (s *scanner) keyEqualFold(a, b key) bool {
	ra, rb := s.b[a.start:a.end], s.b[b.start:b.end]
	i, j := 0, 0
	for i < len(ra) && j < len(rb) {
		var x, y rune
		x, i = next(ra, i)
		y, j = next(rb, j)
		if x != y && !sameFold(x, y) {
			return false
		}
	}
	return i == len(ra) && j == len(rb)
}

// sameFold reports whether two different runes are one under simple case folding.
func sameFold(x, y rune) bool {
	if x < utf8.RuneSelf && y < utf8.RuneSelf {
		x, y = x|0x20, y|0x20
		return x == y && x >= 'a' && x <= 'z'
	}
	return foldRune(x) == foldRune(y)
}

// foldRune is the smallest rune of r's orbit under unicode.SimpleFold: strings.EqualFold joins two
// runes exactly when their foldRune is the same, and encoding/json folds keys to it too.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// foldKey returns a checked key decoded and with every rune folded by foldRune, in s.scratch
// (valid until the next call): two keys are equal under strings.EqualFold exactly when their
// folded forms are equal.
func (s *scanner) foldKey(k key) []byte {
	raw := s.b[k.start:k.end]
	s.scratch = s.scratch[:0]
	for i := 0; i < len(raw); {
		if c := raw[i]; c < utf8.RuneSelf && c != '\\' {
			if c >= 'a' && c <= 'z' {
				c -= 'a' - 'A' // the smallest of {A, a}, of {K, k, K} and of {S, s, ſ}
			}
			s.scratch = append(s.scratch, c)
			i++
			continue
		}
		var r rune
		r, i = next(raw, i)
		s.scratch = utf8.AppendRune(s.scratch, foldRune(r))
	}
	return s.scratch
}

// decodeKey returns the decoded bytes of a checked key. Without escapes it is the raw text
// itself; with escapes it lives in s.scratch and is valid until the next call.
func (s *scanner) decodeKey(k key) []byte {
	raw := s.b[k.start:k.end]
	if !k.escaped {
		return raw
	}
	s.scratch = s.scratch[:0]
	for i := 0; i < len(raw); {
		var r rune
		r, i = next(raw, i)
		s.scratch = utf8.AppendRune(s.scratch, r)
	}
	return s.scratch
}

// keySet is an open-addressing hash set of the keys of one object with more than smallKeys keys.
// A slot holds where the key starts in the input (low offBits bits, never 0) and the top bits of
// its hash, and nothing else: the key itself is read again from the input when a tag matches,
// or when the table grows. That keeps a set of n keys at 16n bytes or less, free of pointers for
// the garbage collector, and the hash is seeded per call, so crafted keys cannot force
// collisions. Inputs must be shorter than 1<<offBits bytes (1 TiB).
type keySet struct {
	slots []uint64
	n     int
}

const (
	offBits = 40
	offMask = 1<<offBits - 1
)

func (s *scanner) takeSet() *keySet {
	if !s.seeded {
		s.seed, s.seeded = maphash.MakeSeed(), true
	}
	if n := len(s.free); n > 0 {
		ks := s.free[n-1]
		s.free = s.free[:n-1]
		return ks
	}
	return &keySet{}
}

func (s *scanner) putSet(ks *keySet) {
	clear(ks.slots)
	ks.n = 0
	s.free = append(s.free, ks)
}

// hash hashes a key as sameKey compares it.
func (s *scanner) hash(k key) uint64 {
	if s.fold {
		return maphash.Bytes(s.seed, s.foldKey(k))
	}
	return maphash.Bytes(s.seed, s.decodeKey(k))
}

// keyAt reads again the key whose text starts at offset start (just after its opening quote).
func (s *scanner) keyAt(start int) key {
	end, escaped, _ := s.str(start - 1)
	return key{start: start, end: end - 1, escaped: escaped}
}

// add inserts k into ks, or returns the key of ks that is the same key (sameKey) and true.
func (s *scanner) add(ks *keySet, k key) (key, bool) {
	if 2*(ks.n+1) > len(ks.slots) {
		s.grow(ks)
	}
	h := s.hash(k)
	tag := h &^ offMask
	mask := len(ks.slots) - 1
	for i := int(h) & mask; ; i = (i + 1) & mask {
		e := ks.slots[i]
		if e == 0 {
			ks.slots[i] = tag | uint64(k.start)
			ks.n++
			return key{}, false
		}
		if e&^offMask == tag {
			if old := s.keyAt(int(e & offMask)); s.sameKey(old, k) {
				return old, true
			}
		}
	}
}

// grow doubles the table (at least 4*smallKeys slots) and re-inserts every key.
func (s *scanner) grow(ks *keySet) {
	old := ks.slots
	ks.slots = make([]uint64, max(4*smallKeys, 2*len(old)))
	mask := len(ks.slots) - 1
	for _, e := range old {
		if e == 0 {
			continue
		}
		i := int(s.hash(s.keyAt(int(e&offMask)))) & mask
		for ks.slots[i] != 0 {
			i = (i + 1) & mask
		}
		ks.slots[i] = e
	}
}
