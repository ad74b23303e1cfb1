package flow_test

import (
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/flow"
)

func TestMaskCodes(t *testing.T) {
	t.Parallel()
	notice := "[promptgate] held tool call send_money for your confirmation: rule payee: recipient does not occur in user. " +
		`Arguments: recipient="GB82WEST12345698765432". To run it once, reply with the code 7KQM-3XPA (valid for 10 minutes).`
	for _, tc := range []struct{ in, want string }{
		{notice, strings.Replace(notice, "7KQM-3XPA", flow.HiddenCode, 1)},
		{"Sure.\n" + notice + "\nAnything else? ABCD-1234", "Sure.\n" + strings.Replace(notice, "7KQM-3XPA", flow.HiddenCode, 1) + "\nAnything else? ABCD-1234"},
		{notice + "\n" + strings.Replace(notice, "7KQM-3XPA", "abcd-efgh", 1),
			strings.Replace(notice, "7KQM-3XPA", flow.HiddenCode, 1) + "\n" + strings.Replace(notice, "7KQM-3XPA", flow.HiddenCode, 1)},
		{"no notice here: 7KQM-3XPA", "no notice here: 7KQM-3XPA"},
		{strings.Replace(notice, "7KQM-3XPA", "7KQM-3XPAB", 1), strings.Replace(notice, "7KQM-3XPA", "7KQM-3XPAB", 1)},
	} {
		got, changed := flow.MaskCodes(tc.in)
		if got != tc.want || changed != (tc.in != tc.want) {
			t.Errorf("MaskCodes(%q)\n got %q (%v)\nwant %q", tc.in, got, changed, tc.want)
		}
	}
}

// TestMaskCodeTokensAsRenderersRewriteThem: a code whose hyphen a renderer turned into another
// dash, a minus sign or a no-break space is still masked, wherever it stands in a text.
func TestMaskCodeTokensAsRenderersRewriteThem(t *testing.T) {
	t.Parallel()
	for _, joiner := range []string{"-", "\u2011", "\u2010", "\u2013", "\u2014", "\u2212", "\u00a0", "\u202f"} {
		in := "Summary: the code 7KQM" + joiner + "3XPA, then (7kqm" + joiner + "3xpa)."
		want := "Summary: the code " + flow.HiddenCode + ", then (" + flow.HiddenCode + ")."
		if got, _ := flow.MaskCodeTokens(in); got != want {
			t.Errorf("MaskCodeTokens(%q) = %q, want %q", in, got, want)
		}
	}
	for _, kept := range []string{"order AB12-CD34X", "x7KQM-3XPA", "lengths 12-34", "7KQM_3XPA", "7KQM/3XPA"} {
		if got, changed := flow.MaskCodeTokens(kept); changed {
			t.Errorf("MaskCodeTokens(%q) = %q, want it unchanged", kept, got)
		}
	}
}

func FuzzMaskCodes(f *testing.F) {
	f.Add("[promptgate] held tool call x for your confirmation: rule r: y. To run it once, reply with the code 7KQM-3XPA (valid for 1 minute).")
	f.Add("[promptgate] held tool call 0000-0000\r1111-1111")
	f.Fuzz(func(t *testing.T, s string) {
		got, changed := flow.MaskCodes(s)
		if !changed && got != s || changed && got == s {
			t.Fatalf("changed %v for %q -> %q", changed, s, got)
		}
		again, _ := flow.MaskCodes(got)
		if again != got {
			t.Fatalf("masking twice changed %q to %q", got, again)
		}
	})
}
