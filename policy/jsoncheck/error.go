package jsoncheck

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// Kind classifies a validation failure. A Kind is itself an error, so callers can write
// errors.Is(err, jsoncheck.DuplicateKey).
type Kind uint8

// The kinds of failure.
const (
	// Syntax: not RFC 8259 JSON (bad grammar, trailing data, empty input, raw control
	// character in a string, byte order mark, ...).
	Syntax Kind = iota + 1
	// InvalidUTF8: a byte sequence that is not UTF-8, or a \u escape of a lone surrogate.
	InvalidUTF8
	// DuplicateKey: an object holds the same key twice (compared after decoding escapes).
	DuplicateKey
	// TooDeep: objects and arrays nest deeper than Limits.MaxDepth.
	TooDeep
	// NotObject: Object was given a valid-looking value that is not an object.
	NotObject
	// CaseVariantKey: with Limits.FoldedKeys, an object holds two keys that differ only in letter
	// case (equal under strings.EqualFold after decoding escapes, not equal without folding).
	CaseVariantKey
	// NumberRange: with Limits.Float64Numbers, a number a float64 cannot hold (see Limits).
	NumberRange
)

// String returns a short lowercase name of the kind.
func (k Kind) String() string {
	switch k {
	case Syntax:
		return "syntax error"
	case InvalidUTF8:
		return "invalid UTF-8"
	case DuplicateKey:
		return "duplicate key"
	case TooDeep:
		return "nesting too deep"
	case NotObject:
		return "not a JSON object"
	case CaseVariantKey:
		return "case-variant key"
	case NumberRange:
		return "number out of float64 range"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Error makes a Kind usable as an errors.Is target.
func (k Kind) Error() string { return "jsoncheck: " + k.String() }

// Error describes why input was refused. errors.Is(err, k) holds for its Kind k.
type Error struct {
	Kind Kind
	// Offset is the byte offset in the input where the problem was found; for DuplicateKey and
	// CaseVariantKey it is the opening quote of the second of the two keys.
	Offset int
	// Key is the second of the two keys, decoded (DuplicateKey and CaseVariantKey only).
	Key string

	detail string
}

// maxKeyInMessage bounds how much of a key QuotedError quotes.
const maxKeyInMessage = 64

// Error reads like `jsoncheck: duplicate key at offset 17` or `jsoncheck: syntax error at offset 3:
// invalid escape character`. It never quotes a key or a value of the input (which may be a model's
// tool arguments or a client's prompt), so it may be logged; a syntax error's detail names at most
// the one byte or rune that is out of place.
func (e *Error) Error() string {
	if e.detail == "" {
		return fmt.Sprintf("jsoncheck: %s at offset %d", e.Kind.String(), e.Offset)
	}
	return fmt.Sprintf("jsoncheck: %s at offset %d: %s", e.Kind.String(), e.Offset, e.detail)
}

// QuotedError is Error with the duplicate (or case-variant) key quoted (cut to 64 bytes),
// `jsoncheck: duplicate key "a" at offset 17`: for telling the author of the input what is wrong
// with it, never for a log.
func (e *Error) QuotedError() string {
	if e.Kind != DuplicateKey && e.Kind != CaseVariantKey {
		return e.Error()
	}
	k := e.Key
	if len(k) > maxKeyInMessage {
		cut := maxKeyInMessage
		for cut > 0 && !utf8.RuneStart(k[cut]) {
			cut--
		}
		k = k[:cut] + "…"
	}
	return fmt.Sprintf("jsoncheck: %s %q at offset %d", e.Kind.String(), k, e.Offset)
}

// Unwrap returns the Kind, so that errors.Is(err, jsoncheck.Syntax) and friends work.
func (e *Error) Unwrap() error { return e.Kind }

func (s *scanner) fail(k Kind, off int, detail string) *Error {
	return &Error{Kind: k, Offset: off, detail: detail}
}

func (s *scanner) tooDeep(off int) *Error {
	return s.fail(TooDeep, off, "more than "+strconv.Itoa(s.max)+" levels")
}

// clash reports k, whose opening quote is at off, as the same key as the earlier key old: a
// DuplicateKey when they are equal after decoding escapes, else a CaseVariantKey.
func (s *scanner) clash(off int, old, k key) *Error {
	kind := DuplicateKey
	if s.fold && !s.keyEqual(old, k) {
		kind = CaseVariantKey
	}
	return &Error{Kind: kind, Offset: off, Key: string(s.decodeKey(k))}
}

// unexpected reports the byte at s.b[i] as out of place; where names the grammar position.
func (s *scanner) unexpected(i int, where string) *Error {
	c := s.b[i]
	if c < 0x80 {
		return s.fail(Syntax, i, fmt.Sprintf("unexpected %q %s", c, where))
	}
	r, size := utf8.DecodeRune(s.b[i:])
	if r == utf8.RuneError && size == 1 {
		return s.fail(InvalidUTF8, i, "")
	}
	if r == '\uFEFF' {
		return s.fail(Syntax, i, "byte order mark not allowed")
	}
	return s.fail(Syntax, i, fmt.Sprintf("unexpected %U %s", r, where))
}
