package assembly

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// isLineBreak reports the characters a model (or a line splitter such as Python's str.splitlines) may read as
// the end of a line: LF, CR, VT, FF, the file/group/record separators U+001C–U+001E, NEL, LS, PS.
func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', '\u001c', '\u001d', '\u001e', '\u0085', '\u2028', '\u2029':
		return true
	}
	return false
}

// OneLine replaces every line break character by a space (CRLF becomes two spaces), so the text cannot start
// a line of its own.
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

// invisible reports characters that render as nothing or as blank space and could hide what starts a line:
// format characters (Cf: zero-width, bidi controls, BOM, tags), variation selectors, the other default-ignorable
// code points (fillers, and unassigned ones such as U+2065 and U+FFF0 that render as nothing), and blank space.
func invisible(r rune) bool {
	if unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Variation_Selector, r) || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) {
		return true
	}
	switch r {
	case '\u034f', '\u115f', '\u1160', '\u17b4', '\u17b5', '\u3164', '\uffa0', '\u2800':
		return true
	}
	return unicode.IsSpace(r) && !isLineBreak(r)
}

// equalsLike reports characters a model could read as the "=" of a section header.
func equalsLike(r rune) bool {
	switch r {
	case '=', '\uff1d', '\u2550', '\u2e40', '\u30a0', '\ua78a', '\u1400', '\u268c', '\u2261', '\u2263', '\u229c', '\u207c', '\u208c', '\ufe66', '\U0001f7f0', '\u2a75', '\u2a76':
		return true
	}
	return false
}

// QuotePrefix is put in front of a line of client text that could be read as a section header.
const QuotePrefix = "> "

// NeutralizeHeaders normalises every line break to LF and quotes each line that, after leading blanks and
// invisible characters, starts with an "="-like character, so client text in a trusted block can never
// produce a line that reads as a "=== ... ===" header.
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
	if !strings.ContainsFunc(s, equalsLike) {
		return s
	}
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		rest := strings.TrimLeftFunc(line, invisible)
		if rest == "" {
			continue
		}
		if r, _ := utf8.DecodeRuneInString(rest); equalsLike(r) {
			lines[i] = QuotePrefix + line
		}
	}
	return strings.Join(lines, "\n")
}
