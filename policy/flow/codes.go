package flow

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Codes as text: how a code is written, read from what a user typed, and found in the notices the
// client was shown. Reading is forgiving and ambiguous on purpose ("Code 23A0-4XYF" reads as
// "Code 23A0" and as "23A0-4XYF"): the codes actually shown, and in the end the HMAC, decide.

// codeAlphabet is Crockford's base32 alphabet.
const codeAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

const (
	codeLen = 8
	// maxCandidates bounds the codes tried per check: of those the app gives (Options.Codes), and
	// of those the user typed.
	maxCandidates = 8
)

// code is a confirmation code: 40 bits, 5 per character of codeAlphabet, the first character in
// the highest bits.
type code uint64

// String writes the code's 8 characters.
func (k code) String() string {
	var out [codeLen]byte
	for i := codeLen - 1; i >= 0; i-- {
		out[i] = codeAlphabet[k&31]
		k >>= 5
	}
	return string(out[:])
}

// display writes the code as notices show it: XXXX-XXXX.
func (k code) display() string { return DisplayCode(k.String()) }

// DisplayCode writes a code as XXXX-XXXX.
func DisplayCode(code string) string {
	if len(code) != codeLen {
		return code
	}
	return code[:4] + "-" + code[4:]
}

// typedValue is a typed character's value in codeAlphabet: case-insensitive, O read as 0, I and L
// as 1; -1 for a character outside it.
func typedValue(ch byte) int {
	if ch >= 'a' && ch <= 'z' {
		ch -= 'a' - 'A'
	}
	switch ch {
	case 'O':
		ch = '0'
	case 'I', 'L':
		ch = '1'
	}
	return alphabetValue(ch)
}

// alphabetValue is a character's value in codeAlphabet as written there (digits, capitals); -1
// for any other.
func alphabetValue(ch byte) int {
	switch {
	case ch >= '0' && ch <= '9':
		return int(ch - '0')
	case ch >= 'A' && ch <= 'Z':
		v := 10 + int(ch-'A')
		switch {
		case ch == 'I' || ch == 'L' || ch == 'O' || ch == 'U':
			return -1
		case ch > 'U':
			v -= 4
		case ch > 'O':
			v -= 3
		case ch > 'L':
			v -= 2
		case ch > 'I':
			v--
		}
		return v
	}
	return -1
}

// appendChars adds the characters of s to a code being read, each by its value (typedValue when
// typed, else alphabetValue); false when one is outside the alphabet.
func appendChars(k code, s string, typed bool) (code, bool) {
	for i := 0; i < len(s); i++ {
		var v int
		if typed {
			v = typedValue(s[i])
		} else {
			v = alphabetValue(s[i])
		}
		if v < 0 {
			return 0, false
		}
		k = k<<5 | code(v)
	}
	return k, true
}

// codeForm is how a typed code was written, for the order in which guesses are tried when no
// notice is visible: a hyphenated form first, then one that holds a digit, then the rest.
type codeForm uint8

const (
	formDashed codeForm = iota // XXXX-XXXX, with any dash
	formDigit                  // 8 characters or two groups of 4 joined by a space, with a digit
	formPlain                  // the same without a digit: an ordinary word may read as one
	numForms
)

// readCodes calls fn with every plausible reading of a code in text, in order: every run of exactly
// 8 ASCII letters and digits, and every two runs of exactly 4 joined by one hyphen, dash or space
// (overlapping pairs included), normalised as typedValue reads characters. The text is read in NFKC
// (full-width forms, no-break and other spaces folded); dashes are '-', U+2010 to U+2015 and
// U+2212. It returns the bytes it read, for a caller that bounds its work.
func readCodes(text string, fn func(k code, f codeForm)) int {
	for i := 0; i < len(text); i++ {
		if text[i] >= utf8.RuneSelf {
			text = norm.NFKC.String(text)
			break
		}
	}
	prev := -1 // start of the run just before, when it was exactly 4 long
	for i := 0; i < len(text); {
		if !isASCIIAlnum(text[i]) {
			i++
			continue
		}
		s := i
		for i < len(text) && isASCIIAlnum(text[i]) {
			i++
		}
		switch i - s {
		case codeLen:
			if k, ok := appendChars(0, text[s:i], true); ok {
				fn(k, formOf(false, hasDigit(text[s:i])))
			}
			prev = -1
		case 4:
			if prev >= 0 {
				if dashed, ok := joiner(text[prev+4 : s]); ok {
					if k, ok := appendChars(0, text[prev:prev+4], true); ok {
						if k, ok := appendChars(k, text[s:i], true); ok {
							fn(k, formOf(dashed, hasDigit(text[prev:prev+4]) || hasDigit(text[s:i])))
						}
					}
				}
			}
			prev = s
		default:
			prev = -1
		}
	}
	return len(text)
}

// formOf classifies a typed code.
func formOf(dashed, digit bool) codeForm {
	switch {
	case dashed:
		return formDashed
	case digit:
		return formDigit
	}
	return formPlain
}

func hasDigit(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			return true
		}
	}
	return false
}

// joiner reports whether the text between two groups of 4 is one hyphen, dash or space (as NFKC
// leaves it), and whether it is a dash.
func joiner(gap string) (dashed, ok bool) {
	if gap == " " {
		return false, true
	}
	if gap == "-" {
		return true, true
	}
	r, n := utf8.DecodeRuneInString(gap)
	return true, n == len(gap) && (r >= '\u2010' && r <= '\u2015' || r == '\u2212')
}

func isASCIIAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// shownCodes calls fn with every code that text shows as a notice writes it: XXXX-XXXX in the
// alphabet's own characters, anywhere in the text. It returns the bytes it read.
func shownCodes(text string, fn func(code)) int {
	for h := 4; h+5 <= len(text); h++ {
		j := strings.IndexByte(text[h:len(text)-4], '-')
		if j < 0 {
			break
		}
		h += j
		if k, ok := appendChars(0, text[h-4:h], false); ok {
			if k, ok := appendChars(k, text[h+1:h+5], false); ok {
				fn(k)
			}
		}
	}
	return len(text)
}

// ShownCodes are the codes text shows as a notice writes them (XXXX-XXXX), in order: what a
// client reads as the codes of the notices in an assistant message.
func ShownCodes(text string) []string {
	var out []string
	shownCodes(text, func(k code) { out = append(out, k.display()) })
	return out
}

// recentCodes keeps the last maxCandidates distinct codes added, oldest first.
type recentCodes []code

func (r *recentCodes) add(k code) {
	if i := slices.Index(*r, k); i >= 0 {
		*r = slices.Delete(*r, i, i+1)
	}
	*r = append(*r, k)
	if len(*r) > maxCandidates {
		*r = slices.Delete(*r, 0, 1)
	}
}

// typedCodes returns the codes the user typed that may confirm a call, in the order they are tried,
// at most maxCandidates (never one inside a notice the user's message quotes or repeats): those
// that answer a notice shown in an assistant message before them,
// latest first; then, with part of the history unseen (the notice may lie there), the other
// readings of the visible user messages, latest first, by form (codeForm). Read once per
// conversation, in one pass: each code an assistant message shows is remembered as it is met, so a
// user message's readings are looked up, never searched for.
func (c *Conversation) typedCodes() []code {
	c.typedOnce.Do(func() {
		shown := map[code]struct{}{}
		var answers recentCodes
		var guesses [numForms]recentCodes
		steps := 0
		for _, seg := range c.segments {
			switch seg.Source.Kind {
			case SourceAssistant:
				n := shownCodes(seg.Text, func(k code) { shown[k] = struct{}{} })
				steps += n
			case SourceUser:
				text, _ := MaskCodes(seg.Text) // a notice the user quotes is not the user's answer
				n := readCodes(text, func(k code, f codeForm) {
					steps++
					if _, ok := shown[k]; ok {
						answers.add(k)
					} else if c.unseen != "" {
						guesses[f].add(k)
					}
				})
				steps += n
			}
		}
		var out []code
		for _, r := range append([]recentCodes{answers}, guesses[:]...) {
			for i := len(r) - 1; i >= 0 && len(out) < maxCandidates; i-- {
				if !slices.Contains(out, r[i]) {
					out = append(out, r[i])
				}
			}
		}
		c.typed = out
		c.codeSteps.Store(int64(steps))
	})
	return c.typed
}

// appCodes reads the codes the app gives beside the conversation: every reading of each text, at
// most maxCandidates in all.
func appCodes(texts []string) []code {
	var out []code
	for _, t := range texts {
		readCodes(t, func(k code, _ codeForm) {
			if len(out) < maxCandidates && !slices.Contains(out, k) {
				out = append(out, k)
			}
		})
	}
	return out
}
