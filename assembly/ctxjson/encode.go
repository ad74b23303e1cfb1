package ctxjson

import (
	"math/bits"
	"unicode/utf16"
	"unicode/utf8"
)

// Encode returns the compact, safely escaped JSON encoding of v (see AppendEncode).
func Encode(v *Value) []byte { return AppendEncode(nil, v) }

// AppendEncode appends the compact JSON encoding of v to dst and returns the extended slice.
//
// Strings and keys are written with the safe escaping: '"' and '\\' as \" and \\, LF, CR and TAB
// as \n, \r and \t, and as \uXXXX (a surrogate pair above U+FFFF): every other C0 control, DEL,
// the C1 controls U+0080–U+009F (NEL included), U+2028, U+2029, and the invisible, format and
// bidi characters that could hide or fake structure: U+00AD, U+034F, U+061C, U+115F, U+1160,
// U+17B4, U+17B5, U+180B–U+180F, U+200B–U+200F, U+202A–U+202E, U+2060–U+206F, U+3164,
// U+FE00–U+FE0F, U+FEFF, U+FFA0, U+FFF0–U+FFFB, the block U+E0000–U+E0FFF (tag characters,
// variation selectors, unassigned default-ignorables), and the rest of Unicode category Cf: every
// default-ignorable code point (tested against the unicode package's tables). Other characters,
// '<', '>', '&' and '/' included, are written as UTF-8; each byte of invalid UTF-8 becomes U+FFFD.
// A nil v is null.
func AppendEncode(dst []byte, v *Value) []byte {
	if v == nil {
		return append(dst, "null"...)
	}
	switch v.kind {
	case KindBool:
		if v.truth {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	case KindNumber:
		return append(dst, v.text...)
	case KindString:
		return appendString(dst, v.text, false)
	case KindArray:
		dst = append(dst, '[')
		for i, e := range v.items {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendEncode(dst, e)
		}
		return append(dst, ']')
	case KindObject:
		dst = append(dst, '{')
		for i, e := range v.items {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, v.keys[i], false)
			dst = append(dst, ':')
			dst = AppendEncode(dst, e)
		}
		return append(dst, '}')
	}
	return append(dst, "null"...)
}

// Size returns the number of characters (code points) of Encode(v), without encoding it.
func Size(v *Value) int {
	if v == nil {
		return 4
	}
	switch v.kind {
	case KindBool:
		if v.truth {
			return 4
		}
		return 5
	case KindNumber:
		return len(v.text)
	case KindString:
		return v.strSize()
	case KindArray:
		n := 2 + max(len(v.items)-1, 0)
		for _, e := range v.items {
			n += Size(e)
		}
		return n
	case KindObject:
		n := 2 + max(len(v.items)-1, 0)
		for i, e := range v.items {
			n += strSize(v.keys[i]) + 1 + Size(e)
		}
		return n
	}
	return 4
}

// sizeUpTo returns Size(v) when that is at most limit, else some number above limit; it stops
// reading as soon as the limit is passed.
func sizeUpTo(v *Value, limit int) int {
	switch v.Kind() {
	case KindString:
		if v.size > 0 {
			return v.size
		}
		return strSizeUpTo(v.text, limit)
	case KindArray, KindObject:
		n := 2 + max(len(v.items)-1, 0)
		for i, e := range v.items {
			if n > limit {
				return n
			}
			if v.kind == KindObject {
				n += strSizeUpTo(v.keys[i], limit-n) + 1
			}
			n += sizeUpTo(e, limit-n)
		}
		return n
	}
	return Size(v)
}

// ellipsis ends a string that was cut.
const ellipsis = "…"

// escapeRune reports whether the non-ASCII rune r must be written as a \u escape.
func escapeRune(r rune) bool {
	switch {
	case r < 0xA0: // C1 controls, NEL included
		return true
	case r < 0x0600:
		return r == 0x00AD || r == 0x034F
	case r < 0x0900:
		return r <= 0x0605 || r == 0x061C || r == 0x06DD || r == 0x070F || r == 0x0890 || r == 0x0891 || r == 0x08E2
	case r < 0x1100:
		return false
	case r < 0x2000:
		return r == 0x115F || r == 0x1160 || r == 0x17B4 || r == 0x17B5 || (r >= 0x180B && r <= 0x180F)
	case r < 0x2070:
		return (r >= 0x200B && r <= 0x200F) || (r >= 0x2028 && r <= 0x202E) || r >= 0x2060
	case r < 0x3164:
		return false
	case r < 0xFE00:
		return r == 0x3164
	case r < 0x10000:
		return r <= 0xFE0F || r == 0xFEFF || r == 0xFFA0 || (r >= 0xFFF0 && r <= 0xFFFB)
	case r < 0xE0000:
		return r == 0x110BD || r == 0x110CD || (r >= 0x13430 && r <= 0x1343F) ||
			(r >= 0x1BCA0 && r <= 0x1BCA3) || (r >= 0x1D173 && r <= 0x1D17A)
	default:
		return r <= 0xE0FFF // tags, variation selectors and the rest of the default-ignorable plane-14 block
	}
}

// plainASCII reports whether the ASCII byte c is written as itself.
func plainASCII(c byte) bool { return c >= 0x20 && c < 0x7F && c != '"' && c != '\\' }

// char measures the character of s at byte i: its length in s and the number of characters its
// encoding takes.
func char(s string, i int) (width, enc int) {
	c := s[i]
	if c < utf8.RuneSelf {
		if plainASCII(c) {
			return 1, 1
		}
		return 1, runeSize(rune(c))
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && size == 1 {
		return 1, 1 // written as U+FFFD
	}
	return size, runeSize(r)
}

// runeSize returns the number of characters the encoding of r takes; r is a valid rune or
// utf8.RuneError.
func runeSize(r rune) int {
	switch {
	case r < utf8.RuneSelf:
		switch c := byte(r); {
		case plainASCII(c):
			return 1
		case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
			return 2
		default:
			return 6
		}
	case !escapeRune(r):
		return 1
	case r > 0xFFFF:
		return 12
	default:
		return 6
	}
}

// strSize returns the number of characters of the encoding of the string v, quotes included:
// what Parse measured, else strSize(v.text).
func (v *Value) strSize() int {
	if v.size > 0 {
		return v.size
	}
	return strSize(v.text)
}

// strSize returns the number of characters of the encoding of s, quotes included.
func strSize(s string) int { return strSizeUpTo(s, len(s)*12+2) }

// strSizeUpTo is strSize, but stops with some number above limit once that is passed.
func strSizeUpTo(s string, limit int) int {
	n := 2
	for i := 0; i < len(s) && n <= limit; {
		j := plainRun(s, i)
		n += j - i
		if i = j; i < len(s) {
			w, e := char(s, i)
			i += w
			n += e
		}
	}
	return n
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// plainRun returns the index of the first byte at or after i that is not plain ASCII, or len(s).
// It tests 8 bytes at a time: with every byte below 0x80 (else x has a high bit set), x+ones
// sets a high bit exactly where a byte is 0x7F, and each subtraction borrows into a high bit
// exactly when some byte is below the bound, so the word test is exact. A carry or borrow only
// moves to higher bytes, from a byte that is itself flagged, so the lowest flagged byte is the
// first one that is not plain.
func plainRun(s string, i int) int {
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if m := (x | (x + ones) | (x - 0x20*ones) | ((x ^ ('"' * ones)) - ones) | ((x ^ ('\\' * ones)) - ones)) & highs; m != 0 {
			return i + bits.TrailingZeros64(m)>>3
		}
	}
	for i < len(s) && plainASCII(s[i]) {
		i++
	}
	return i
}

// cutPoint returns the longest prefix s[:p] whose encoding (without quotes) takes at most room
// characters, p at a character boundary, and the characters it takes.
func cutPoint(s string, room int) (p, used int) {
	for p < len(s) {
		w, e := char(s, p)
		if used+e > room {
			break
		}
		p += w
		used += e
	}
	return p, used
}

// appendString appends s as a JSON string with the safe escaping; cut adds the ellipsis.
func appendString(dst []byte, s string, cut bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if i = plainRun(s, i); i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if plainASCII(c) {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = appendU(dst, rune(c))
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
		case escapeRune(r):
			dst = append(dst, s[start:i]...)
			if r > 0xFFFF {
				r1, r2 := utf16.EncodeRune(r)
				dst = appendU(appendU(dst, r1), r2)
			} else {
				dst = appendU(dst, r)
			}
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	if cut {
		dst = append(dst, ellipsis...)
	}
	return append(dst, '"')
}

// appendU appends \uXXXX for r <= 0xFFFF.
func appendU(dst []byte, r rune) []byte {
	const hex = "0123456789abcdef"
	return append(dst, '\\', 'u', hex[r>>12&0xF], hex[r>>8&0xF], hex[r>>4&0xF], hex[r&0xF])
}
