package ctxjson

import (
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/promptgate/promptgate/policy/jsoncheck"
)

// MaxParseDepth is the deepest nesting of objects and arrays Parse accepts. Request bodies are
// held to a much lower limit before they get here (policy/jsoncheck); this only keeps Parse,
// Encode and Build from recursing without bound on anything else.
const MaxParseDepth = 10000

// linearKeys is how many keys of one object Parse checks for duplicates by a linear scan.
const linearKeys = 16

// Parse parses one JSON value (surrounding JSON whitespace allowed) into an ordered tree. Its input
// is normally checked before (policy/jsoncheck); Parse still refuses, with an error and never a
// panic, anything that is not RFC 8259 JSON, objects with a duplicate key (compared after decoding
// escapes and repairing invalid UTF-8) and nesting deeper than MaxParseDepth. It is lenient where
// the encoder repairs: invalid UTF-8 is kept and encoded as U+FFFD, and a \u escape of a lone
// surrogate decodes to U+FFFD, as encoding/json does.
//
// Parse measures the encoding of each string as it reads it, so that Size and Build do not read
// the strings of a parsed tree again. raw must not change during Parse; the tree holds copies.
func Parse(raw []byte) (*Value, error) {
	// A read-only view of raw, so that the scanning code is the encoder's: every string or number
	// that goes into the tree is copied out of it (into p.text).
	p := parser{b: unsafe.String(unsafe.SliceData(raw), len(raw)), text: make([]byte, 0, len(raw))}
	i := p.ws(0)
	v, i, err := p.value(i, 0)
	if err != nil {
		return nil, err
	}
	if i = p.ws(i); i != len(raw) {
		return nil, p.errf(i, "unexpected data after the value")
	}
	return v, nil
}

type parser struct {
	b   string // the input, a view of Parse's raw: never let a slice of it into the tree
	buf []byte // scratch for decoding escaped strings

	// text holds the bytes of the tree's strings and numbers, each written once and never changed:
	// a decoded string is never longer than its JSON text, so len(raw) bytes hold them all without
	// a move.
	text []byte
	// The tree's values and its containers' keys and items are cut from larger allocations; the
	// members of the containers being read wait on the stacks until their container ends.
	values    slab[Value]
	itemSlab  slab[*Value]
	keySlab   slab[string]
	itemStack []*Value
	keyStack  []string
}

// slab hands out parts of larger allocations, so that a tree of many small values costs a few
// allocations. What it hands out is never handed out again; a part's capacity is its length.
type slab[T any] struct {
	free []T
	next int // the size of the next allocation
}

// take returns n zero values of T.
func (s *slab[T]) take(n int) []T {
	if n > len(s.free) {
		s.next = min(max(2*s.next, 8), 256)
		s.free = make([]T, max(n, s.next))
	}
	out := s.free[:n:n]
	s.free = s.free[n:]
	return out
}

// keep copies b into the parser's text and returns it as a string that aliases nothing else.
func (p *parser) keep(b string) string {
	if b == "" {
		return ""
	}
	if len(p.text)+len(b) > cap(p.text) {
		return strings.Clone(b) // cannot happen (see text); a copy of its own is as good
	}
	at := len(p.text)
	p.text = append(p.text, b...)
	return unsafe.String(unsafe.SliceData(p.text[at:]), len(b))
}

// newValue is a value of the tree.
func (p *parser) newValue(v Value) *Value {
	out := &p.values.take(1)[0]
	*out = v
	return out
}

// parseError is what Parse returns; Offset is the byte offset of the problem.
type parseError struct {
	Offset int
	msg    string
}

func (e *parseError) Error() string {
	return fmt.Sprintf("ctxjson: parse: offset %d: %s", e.Offset, e.msg)
}

func (p *parser) errf(off int, format string, args ...any) error {
	return &parseError{Offset: off, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) ws(i int) int {
	for i < len(p.b) {
		switch p.b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (p *parser) value(i, depth int) (*Value, int, error) {
	if i >= len(p.b) {
		return nil, i, p.errf(i, "unexpected end of input, expected a value")
	}
	switch c := p.b[i]; c {
	case '{':
		return p.object(i, depth+1)
	case '[':
		return p.array(i, depth+1)
	case '"':
		s, size, j, err := p.str(i)
		if err != nil {
			return nil, j, err
		}
		return p.newValue(Value{kind: KindString, text: s, size: size}), j, nil
	case 't':
		j, err := p.lit(i, "true")
		return p.newValue(Value{kind: KindBool, truth: true}), j, err
	case 'f':
		j, err := p.lit(i, "false")
		return p.newValue(Value{kind: KindBool}), j, err
	case 'n':
		j, err := p.lit(i, "null")
		return p.newValue(Value{kind: KindNull}), j, err
	default:
		if c == '-' || isDigit(c) {
			j := i + 1
			for j < len(p.b) && (isDigit(p.b[j]) || p.b[j] == '.' || p.b[j] == 'e' || p.b[j] == 'E' || p.b[j] == '+' || p.b[j] == '-') {
				j++
			}
			text := p.b[i:j]
			if !validNumber(text) {
				return nil, i, p.errf(i, "invalid number %q", text)
			}
			return p.newValue(Value{kind: KindNumber, text: p.keep(text)}), j, nil
		}
		return nil, i, p.errf(i, "unexpected %q, expected a value", c)
	}
}

func (p *parser) lit(i int, lit string) (int, error) {
	if len(p.b)-i < len(lit) || p.b[i:i+len(lit)] != lit {
		return i, p.errf(i, "invalid literal, expected %s", lit)
	}
	return i + len(lit), nil
}

func (p *parser) object(i, depth int) (*Value, int, error) {
	if depth > MaxParseDepth {
		return nil, i, p.errf(i, "nesting deeper than %d", MaxParseDepth)
	}
	v := p.newValue(Value{kind: KindObject})
	var seen map[string]struct{}
	i = p.ws(i + 1)
	if i < len(p.b) && p.b[i] == '}' {
		return v, i + 1, nil
	}
	// This object's keys and values are on the stacks from these marks on.
	mark, itemMark := len(p.keyStack), len(p.itemStack)
	for {
		if i >= len(p.b) {
			return nil, i, p.errf(i, "unexpected end of input, expected an object key")
		}
		if p.b[i] != '"' {
			return nil, i, p.errf(i, "unexpected %q, expected an object key", p.b[i])
		}
		k, _, j, err := p.str(i)
		if err != nil {
			return nil, j, err
		}
		// A key is compared as it will be encoded: two keys that differ only in invalid UTF-8 would
		// both be written as U+FFFD, a duplicate in the output.
		k = validKey(k)
		if seen != nil {
			if _, dup := seen[k]; dup {
				return nil, i, p.errf(i, "duplicate key %q", k)
			}
			seen[k] = struct{}{}
		} else {
			keys := p.keyStack[mark:]
			for _, old := range keys {
				if old == k {
					return nil, i, p.errf(i, "duplicate key %q", k)
				}
			}
			if len(keys) == linearKeys {
				seen = make(map[string]struct{}, 4*linearKeys)
				for _, old := range keys {
					seen[old] = struct{}{}
				}
				seen[k] = struct{}{}
			}
		}
		if i = p.ws(j); i >= len(p.b) || p.b[i] != ':' {
			return nil, i, p.errf(i, "expected ':' after object key")
		}
		var val *Value
		if val, i, err = p.value(p.ws(i+1), depth); err != nil {
			return nil, i, err
		}
		p.keyStack = append(p.keyStack, k)
		p.itemStack = append(p.itemStack, val)
		if i = p.ws(i); i >= len(p.b) {
			return nil, i, p.errf(i, "unexpected end of input, expected ',' or '}'")
		}
		switch p.b[i] {
		case ',':
			i = p.ws(i + 1)
		case '}':
			n := len(p.keyStack) - mark
			v.keys = p.keySlab.take(n)
			copy(v.keys, p.keyStack[mark:])
			v.items = p.itemSlab.take(n)
			copy(v.items, p.itemStack[itemMark:])
			p.keyStack, p.itemStack = p.keyStack[:mark], p.itemStack[:itemMark]
			return v, i + 1, nil
		default:
			return nil, i, p.errf(i, "unexpected %q, expected ',' or '}'", p.b[i])
		}
	}
}

func (p *parser) array(i, depth int) (*Value, int, error) {
	if depth > MaxParseDepth {
		return nil, i, p.errf(i, "nesting deeper than %d", MaxParseDepth)
	}
	v := p.newValue(Value{kind: KindArray})
	i = p.ws(i + 1)
	if i < len(p.b) && p.b[i] == ']' {
		return v, i + 1, nil
	}
	mark := len(p.itemStack) // this array's items are on the stack from mark on
	for {
		val, j, err := p.value(i, depth)
		if err != nil {
			return nil, j, err
		}
		p.itemStack = append(p.itemStack, val)
		if i = p.ws(j); i >= len(p.b) {
			return nil, i, p.errf(i, "unexpected end of input, expected ',' or ']'")
		}
		switch p.b[i] {
		case ',':
			i = p.ws(i + 1)
		case ']':
			v.items = p.itemSlab.take(len(p.itemStack) - mark)
			copy(v.items, p.itemStack[mark:])
			p.itemStack = p.itemStack[:mark]
			return v, i + 1, nil
		default:
			return nil, i, p.errf(i, "unexpected %q, expected ',' or ']'", p.b[i])
		}
	}
}

// validKey repairs invalid UTF-8 in a key as the encoder would (each invalid byte becomes U+FFFD).
func validKey(k string) string {
	if utf8.ValidString(k) {
		return k
	}
	b := make([]byte, 0, len(k)+8)
	for i := 0; i < len(k); {
		r, size := utf8.DecodeRuneInString(k[i:])
		b = utf8.AppendRune(b, r) // RuneError for an invalid byte, with size 1
		i += size
	}
	return string(b)
}

// str decodes the string at p.b[i] == '"' and returns it, the characters of its encoding (quotes
// included, what strSize returns for it) and the offset after its closing quote.
//
// The encoding is measured on the input: a raw byte of the input is measured as char measures it,
// an escape by what it decodes to. That equals measuring the decoded string, since a UTF-8
// sequence never spans an escape (what an escape decodes to starts with an ASCII or a lead byte,
// and a raw run of bytes ends before a quote, backslash or control byte).
func (p *parser) str(i int) (string, int, int, error) {
	start := i
	i++
	j := plainRun(p.b, i)
	if j < len(p.b) && p.b[j] == '"' {
		return p.keep(p.b[i:j]), j - i + 2, j + 1, nil // common case: plain ASCII, nothing to escape
	}
	n := 2 + j - i // characters of the encoding so far
	seg := i       // the raw bytes from seg on are not yet in p.buf
	escaped := false
	p.buf = p.buf[:0]
	for i = j; ; {
		if i >= len(p.b) {
			return "", 0, i, p.errf(start, "unterminated string")
		}
		c := p.b[i]
		switch {
		case c == '"':
			if !escaped {
				return p.keep(p.b[seg:i]), n, i + 1, nil
			}
			p.buf = append(p.buf, p.b[seg:i]...)
			return p.keep(unsafe.String(unsafe.SliceData(p.buf), len(p.buf))), n, i + 1, nil
		case c < 0x20:
			return "", 0, i, p.errf(i, "raw control character in string")
		case plainASCII(c):
			j := plainRun(p.b, i+1)
			n += j - i
			i = j
			continue
		case c != '\\':
			w, e := char(p.b, i) // DEL or a UTF-8 sequence, valid or not
			n += e
			i += w
			continue
		}
		if i+1 >= len(p.b) {
			return "", 0, i, p.errf(start, "unterminated string")
		}
		p.buf = append(p.buf, p.b[seg:i]...)
		escaped = true
		switch e := p.b[i+1]; e {
		case '"', '\\':
			p.buf = append(p.buf, e)
			n += 2
		case '/':
			p.buf = append(p.buf, e)
			n++
		case 'b':
			p.buf = append(p.buf, '\b')
			n += 6
		case 'f':
			p.buf = append(p.buf, '\f')
			n += 6
		case 'n':
			p.buf = append(p.buf, '\n')
			n += 2
		case 'r':
			p.buf = append(p.buf, '\r')
			n += 2
		case 't':
			p.buf = append(p.buf, '\t')
			n += 2
		case 'u':
			r, ok := jsoncheck.Hex4(p.b, i+2)
			if !ok {
				return "", 0, i, p.errf(i, "invalid \\u escape")
			}
			i += 6
			if utf16.IsSurrogate(r) {
				// A pair decodes to one rune; anything else to U+FFFD, like encoding/json.
				if r2, ok := jsoncheck.Hex4(p.b, i+2); ok && i+1 < len(p.b) && p.b[i] == '\\' && p.b[i+1] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						i += 6
					} else {
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			p.buf = utf8.AppendRune(p.buf, r)
			n += runeSize(r)
			seg = i
			continue
		default:
			return "", 0, i, p.errf(i, "invalid escape %q", e)
		}
		i += 2
		seg = i
	}
}
