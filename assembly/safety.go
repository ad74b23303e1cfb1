package assembly

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Marker defenses for client text placed in trusted blocks (APPLICATION INSTRUCTIONS, AVAILABLE
// TOOLS).
//
// The section headers of the system message are lines that start with "===". Client text may hold
// such a line, hidden or disguised: after blanks or invisible characters (zero-width, bidi
// controls, tag characters, variation selectors, soft hyphen, fillers, combining marks with nothing
// to attach to), spelt with look-alike characters (fullwidth ＝, small ﹦, ⩶, box-drawing ═, ≡, the
// double hyphens ⹀ ゠ ᐀, ꓿ ...), or after a line break other than LF (CR, VT, FF, NEL, LS, PS, the
// separators U+001C–U+001E). The defenses are:
//   - OneLine (tool names and descriptions, directives): every line break becomes a space, so the text stays
//     on the line that starts with "- ".
//   - NeutralizeHeaders (the client's system texts): line breaks are normalised to LF and every line whose
//     first visible character, folded with NFKC (golang.org/x/text/unicode/norm), is "="-like is quoted
//     with "> ", so that it can never be read as a header.
//   - RevealHidden (both): the characters that hide text from a human reviewer while a model still reads it
//     — the Unicode tag characters U+E0000–U+E007F ("ASCII smuggling") and the bidi embedding, override and
//     isolate controls (Trojan Source) — are written as visible <U+XXXX> escapes.
// Untrusted data never reaches a trusted block: it goes into the runtime context JSON (see
// ctxjson), where every line break and invisible character is \u-escaped.

// isLineBreak reports the characters a model (or a line splitter such as Python's str.splitlines)
// may read as the end of a line: LF, CR, VT, FF, the file/group/record separators U+001C–U+001E,
// NEL, LS, PS.
func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', '\u001c', '\u001d', '\u001e', '\u0085', '\u2028', '\u2029':
		return true
	}
	return false
}

// OneLine replaces every line break character by a space (CRLF becomes two spaces), so the text
// cannot start a line of its own.
func OneLine(s string) string {
	if !strings.ContainsFunc(s, isLineBreak) {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	return strings.Map(func(r rune) rune {
		if isLineBreak(r) {
			return ' '
		}
		return r
	}, s)
}

// invisible reports characters that render as nothing or as blank space and could hide what starts
// a line: format characters (Cf: zero-width, bidi controls, BOM, soft hyphen, tags), variation
// selectors, the other default-ignorable code points (fillers, and unassigned ones such as U+2065
// and U+FFF0 that render as nothing), blank space (NBSP, the U+2000 spaces, ideographic space...),
// and combining marks (Mn, Me), which at the start of a line have nothing to attach to.
func invisible(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || r == '\t'
	}
	if unicode.In(r, unicode.Cf, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point, unicode.Mn, unicode.Me) {
		return true
	}
	switch r {
	case '\u115f', '\u1160', '\u3164', '\uffa0', '\u2800':
		return true
	}
	return unicode.IsSpace(r) && !isLineBreak(r)
}

// equalsLike reports characters a model could read as the "=" of a section header and that NFKC
// does not fold to "=": the equals sign itself and its look-alikes (Unicode confusables of "=",
// double lines and bars).
func equalsLike(r rune) bool {
	switch r {
	case '=', '\u2550', '\u2e40', '\u30a0', '\ua78a', '\ua4ff', '\u1400', '\u268c', '\u2261', '\u2263',
		'\u229c', '\u3013', '\U00010190', '\U0001f7f0', '\u2017', '\u2a75', '\u2a76':
		return true
	}
	return false
}

// headerStart reports whether a line whose first visible character is r could be read as a section
// header: r, or the first visible character of its NFKC form (fullwidth ＝, small ﹦, super- and
// subscript =, ⩶ ...), is "="-like.
func headerStart(r rune) bool {
	f, blank := folded(r)
	return !blank && equalsLike(f)
}

// folded returns the first visible character of r's NFKC form, or blank=true when that form holds
// only blanks and invisible characters (e.g. U+1FCE, a spacing accent, folds to a space and
// combining marks).
func folded(r rune) (f rune, blank bool) {
	if r < utf8.RuneSelf || equalsLike(r) {
		return r, invisible(r)
	}
	var buf [utf8.UTFMax]byte
	rest := strings.TrimLeftFunc(norm.NFKC.String(string(buf[:utf8.EncodeRune(buf[:], r)])), invisible)
	if rest == "" {
		return 0, true
	}
	f, _ = utf8.DecodeRuneInString(rest)
	return f, false
}

// LooksLikeHeader reports whether a line (without its line break) could be read as a section
// header: its first character that is neither blank nor invisible, before or after NFKC folding, is
// "="-like.
func LooksLikeHeader(line string) bool {
	for _, r := range line {
		if invisible(r) {
			continue
		}
		f, blank := folded(r)
		if blank {
			continue
		}
		return equalsLike(f)
	}
	return false
}

// QuotePrefix is put in front of a line of client text that could be read as a section header.
const QuotePrefix = "> "

// NeutralizeHeaders normalises every line break to LF and quotes each line that LooksLikeHeader, so
// client text in a trusted block can never produce a line that reads as a "=== ... ===" header.
func NeutralizeHeaders(s string) string {
	if strings.ContainsFunc(s, func(r rune) bool { return isLineBreak(r) && r != '\n' }) {
		s = strings.ReplaceAll(s, "\r\n", "\n")
		s = strings.Map(func(r rune) rune {
			if isLineBreak(r) {
				return '\n'
			}
			return r
		}, s)
	}
	if !strings.ContainsFunc(s, func(r rune) bool { return r == '=' || r >= utf8.RuneSelf }) {
		return s // plain ASCII without "=" holds no header
	}
	var b strings.Builder
	rest, changed := s, false
	for {
		line, more, found := strings.Cut(rest, "\n")
		if LooksLikeHeader(line) {
			if !changed {
				b.Grow(len(s) + 16)
				b.WriteString(s[:len(s)-len(rest)])
				changed = true
			}
			b.WriteString(QuotePrefix)
		}
		if changed {
			b.WriteString(line)
			if found {
				b.WriteByte('\n')
			}
		}
		if !found {
			break
		}
		rest = more
	}
	if !changed {
		return s
	}
	return b.String()
}

// hidden reports the characters RevealHidden makes visible: the tag characters U+E0000–U+E007F and
// the bidi embedding, override and isolate controls U+202A–U+202E, U+2066–U+2069.
func hidden(r rune) bool {
	return (r >= 0xE0000 && r <= 0xE007F) || (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069)
}

// RevealHidden writes each hidden character (see hidden) as "<U+XXXX>", so text smuggled in tag
// characters or reordered by bidi controls reads the same to the model as to a person reviewing the
// prompt. Other text is returned as it is (the same string when nothing is hidden).
func RevealHidden(s string) string {
	if !strings.ContainsFunc(s, hidden) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 32)
	for _, r := range s {
		if hidden(r) {
			b.WriteString("<U+")
			b.WriteString(strings.ToUpper(strconv.FormatInt(int64(r), 16)))
			b.WriteByte('>')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
