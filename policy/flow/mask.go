package flow

import "strings"

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
// standing alone) by HiddenCode, wherever it stands: what is done to every text but the user's own
// of a body that holds a notice, since apps move the model's earlier text around (into a summary
// in the system message, re-wrapped across lines, split over messages) and a code must reach the
// model from none of them. It reports whether it changed anything.
func MaskCodeTokens(text string) (string, bool) {
	if len(text) < 9 || strings.IndexByte(text, '-') < 0 {
		return text, false
	}
	return maskLine(text)
}

// maskLine replaces every code-shaped token of a notice (XXXX-XXXX in the code alphabet, letters in
// any case) by HiddenCode.
func maskLine(line string) (string, bool) {
	var b strings.Builder
	changed := false
	start := 0
	for i := 0; i+9 <= len(line); {
		if isCodeToken(line, i) {
			b.WriteString(line[start:i])
			b.WriteString(HiddenCode)
			i += 9
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

// isCodeToken reports whether line[i:i+9] is a code written as XXXX-XXXX standing alone.
func isCodeToken(line string, i int) bool {
	alnum := func(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	if i > 0 && alnum(line[i-1]) || i+9 < len(line) && alnum(line[i+9]) || line[i+4] != '-' {
		return false
	}
	_, ok := appendChars(0, line[i:i+4]+line[i+5:i+9], true)
	return ok
}
