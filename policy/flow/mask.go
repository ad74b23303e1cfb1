package flow

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// NoticeMarker starts every notice of a held call; a text without it holds no code to mask.
const NoticeMarker = "[promptgate] held tool call "

// HiddenCode stands in for a confirmation code in what the model is shown.
const HiddenCode = "[code hidden]"

// MaskCodes replaces the confirmation codes in the notices of held calls within an assistant text
// (what the client sends back as the model's earlier turn) by HiddenCode: a code is the user's
// decision, and a model that saw it could write a notice of its own that asks the user to confirm
// another call with it. It reports whether it changed anything. Text outside a notice is left as it
// is.
func MaskCodes(text string) (string, bool) {
	if !strings.Contains(text, NoticeMarker) {
		return text, false
	}
	var b strings.Builder
	changed := false
	rest := text
	for {
		i := strings.Index(rest, NoticeMarker)
		if i < 0 {
			break
		}
		// A notice runs to its end of line: it is written on one line, values quoted with escapes.
		end := strings.IndexAny(rest[i:], "\n\r")
		if end < 0 {
			end = len(rest)
		} else {
			end += i
		}
		b.WriteString(rest[:i])
		masked, ok := maskLine(rest[i:end])
		changed = changed || ok
		b.WriteString(masked)
		rest = rest[end:]
	}
	if !changed {
		return text, false
	}
	b.WriteString(rest)
	return b.String(), true
}

// MaskCodeTokens replaces every code-shaped token of a text (XXXX-XXXX in the code alphabet,
// standing alone, the hyphen possibly turned into another dash or a no-break space by a renderer)
// by HiddenCode, wherever it stands: what is done to every text but the user's own of a body that
// holds a notice, since apps move the model's earlier text around (into a summary in the system
// message, re-wrapped across lines, split over messages) and a code must reach the model from none
// of them. It reports whether it changed anything.
func MaskCodeTokens(text string) (string, bool) {
	if len(text) < 9 {
		return text, false
	}
	return maskLine(text)
}

// maskLine replaces every code-shaped token of a notice (XXXX-XXXX in the code alphabet, letters in
// any case, any dash) by HiddenCode.
func maskLine(line string) (string, bool) {
	var b strings.Builder
	changed := false
	start := 0
	for i := 0; i+9 <= len(line); {
		if n := codeTokenLen(line, i); n > 0 {
			b.WriteString(line[start:i])
			b.WriteString(HiddenCode)
			i += n
			start, changed = i, true
			continue
		}
		i++
	}
	if !changed {
		return line, false
	}
	b.WriteString(line[start:])
	return b.String(), true
}

// codeTokenLen is the length of the code written at line[i:] as XXXX-XXXX standing alone (the
// joiner a hyphen, another dash, a minus sign or a no-break space), 0 when none is.
func codeTokenLen(line string, i int) int {
	alnum := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	if i > 0 && alnum(line[i-1]) {
		return 0
	}
	j, size := utf8.DecodeRuneInString(line[i+4:])
	if !isCodeJoiner(j) || i+8+size > len(line) {
		return 0
	}
	end := i + 8 + size
	if end < len(line) && alnum(line[end]) {
		return 0
	}
	if _, ok := appendChars(0, line[i:i+4]+line[i+4+size:end], true); !ok {
		return 0
	}
	return end - i
}

// isCodeJoiner reports whether r joins a code's halves as a notice writes it or a renderer
// rewrites it: a hyphen or any other dash, a minus sign, a no-break space.
func isCodeJoiner(r rune) bool {
	return r == '-' || r == '\u2212' || r == '\u00a0' || r == '\u202f' || unicode.Is(unicode.Pd, r)
}
