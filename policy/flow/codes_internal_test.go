package flow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// readings are the codes readCodes reads in text, as strings.
func readings(text string) []string {
	var out []string
	readCodes(text, func(k code, _ codeForm) { out = append(out, k.String()) })
	return out
}

// TestReadCodes: every plausible reading of what a user types — the code after a word of four
// letters, dashes and spaces of other keyboards, full-width forms — and none inside a longer word.
func TestReadCodes(t *testing.T) {
	t.Parallel()
	const want = "23A04XYF"
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"23A0-4XYF", []string{want}},
		{"23a04xyf", []string{want}},
		{"Code 23A0-4XYF", []string{"C0DE23A0", want}},
		{"okay 23A0-4XYF", []string{"0KAY23A0", want}},
		{"Sure 23A0-4XYF", []string{want}}, // U is not in the alphabet: only the code itself reads
		{"Please send 23A0-4XYF.", []string{"SEND23A0", want}},
		{"send 23A0 4XYF now", []string{"SEND23A0", want}},
		{"23A0\u20134XYF", []string{want}},                                         // en dash
		{"23A0\u20144XYF", []string{want}},                                         // em dash
		{"23A0\u20104XYF", []string{want}},                                         // hyphen
		{"23A0\u20114XYF", []string{want}},                                         // non-breaking hyphen
		{"23A0\u20124XYF", []string{want}},                                         // figure dash
		{"23A0\u20154XYF", []string{want}},                                         // horizontal bar
		{"23A0\u22124XYF", []string{want}},                                         // minus sign
		{"23A0\u00a04XYF", []string{want}},                                         // no-break space
		{"23A0\u202f4XYF", []string{want}},                                         // narrow no-break space
		{"23A0\u30004XYF", []string{want}},                                         // ideographic space
		{"\uff12\uff13\uff21\uff10\uff0d\uff14\uff38\uff39\uff26", []string{want}}, // full-width
		{"\uff12\uff13\uff21\uff10\uff14\uff38\uff39\uff26", []string{want}},       // full-width, no hyphen
		{"コードは23A0-4XYFです", []string{want}},
		{"X23A04XYF", nil},
		{"23A04XYFX", nil},
		{"X23A0-4XYF", nil},
		{"23A0--4XYF", nil},
		{"23A0 - 4XYF", nil},
		{"23A0\t4XYF", nil},
		{"23A0-4XYF-ZZZZ", []string{want, "4XYFZZZZ"}},
		{"standard", []string{"STANDARD"}},
		{"", nil},
	} {
		if got := readings(tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("%q: read %q, want %q", tc.text, got, tc.want)
		}
	}
}

// TestCodeForms: the forms that order guesses when no notice is visible.
func TestCodeForms(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]codeForm{
		"23A0-4XYF": formDashed, "ABCD\u2014EFGH": formDashed, "23A0 4XYF": formDigit, "23A04XYF": formDigit,
		"standard": formPlain, "ABCD EFGH": formPlain,
	} {
		var got []codeForm
		readCodes(text, func(_ code, f codeForm) { got = append(got, f) })
		if len(got) != 1 || got[0] != want {
			t.Errorf("%q: forms %v, want %v", text, got, want)
		}
	}
}

// TestShownCodes: a code counts as shown where it stands as notices write it, and only so.
func TestShownCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"reply with the code 7KQM-3XPA (valid for 10 minutes).", []string{"7KQM3XPA"}},
		{"7KQM-3XPA", []string{"7KQM3XPA"}},
		{"x7KQM-3XPAy", []string{"7KQM3XPA"}},
		{"7KQM-3XPA-AAAA", []string{"7KQM3XPA", "3XPAAAAA"}},
		{"7kqm-3xpa 7KQM 3XPA 7KQM3XPA 7KQO-3XPA 7KQM–3XPA", nil},
		{"-7KQM-", nil},
		{"", nil},
	} {
		var got []string
		shownCodes(tc.text, func(k code) { got = append(got, k.String()) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: shown %q, want %q", tc.text, got, tc.want)
		}
	}
}

// TestCodeText: a code's characters and their values agree with the alphabet both ways.
func TestCodeText(t *testing.T) {
	t.Parallel()
	for i := 0; i < len(codeAlphabet); i++ {
		if v := alphabetValue(codeAlphabet[i]); v != i {
			t.Errorf("%c: value %d, want %d", codeAlphabet[i], v, i)
		}
	}
	for ch := 0; ch < 256; ch++ {
		if v := alphabetValue(byte(ch)); v >= 0 && codeAlphabet[v] != byte(ch) {
			t.Errorf("%q: value %d outside the alphabet", rune(ch), v)
		}
	}
	for _, s := range []string{"00000000", "ZZZZZZZZ", "7KQM3XPA"} {
		k, ok := appendChars(0, s, false)
		if !ok || k.String() != s || k.display() != s[:4]+"-"+s[4:] {
			t.Errorf("%s: read %v %v as %s", s, k, ok, k.String())
		}
	}
}

// TestCodeSearchLinear: the code search reads each message once, whatever the conversation holds:
// many assistant messages that show codes and many user messages of near misses, the worst case of
// a search that looks each typed code up in every earlier assistant message. The bound is on the
// bytes and readings the search goes through, counted by the search.
func TestCodeSearchLinear(t *testing.T) {
	t.Parallel()
	var s Spec
	if err := json.Unmarshal([]byte(`{"flows":[{"id":"f","after":["untrusted"],"tools":["pay"],"verdict":"confirm"}]}`), &s); err != nil {
		t.Fatal(err)
	}
	p, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, rounds := range []int{100, 2000} {
		tr := NewTranscript()
		tr.Text(RoleUser, "hi", 0)
		text := 0
		for i := range rounds {
			shown := fmt.Sprintf("reply with the code %04X-%04X (valid for 10 minutes).", i, i)
			var near []string
			for j := range 30 {
				near = append(near, fmt.Sprintf("%04X-%04X %04X %04X standard", i, j+i+1, j, i))
			}
			user := strings.Join(near, " ")
			tr.Text(RoleAssistant, shown, 2*i+1)
			tr.Text(RoleUser, user, 2*i+2)
			text += len(shown) + len(user)
		}
		c, err := p.Analyze(tr, Options{})
		if err != nil {
			t.Fatal(err)
		}
		c.typedCodes()
		if steps, bound := c.codeSteps.Load(), int64(2*text); steps > bound || steps < int64(text) {
			t.Errorf("%d rounds: %d steps for %d bytes of text, want between %d and %d", rounds, steps, text, text, bound)
		}
	}
}
