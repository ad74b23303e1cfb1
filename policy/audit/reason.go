package audit

import (
	"strings"
	"unicode/utf8"
)

// MaxReasonHead bounds ReasonHead, in bytes.
const MaxReasonHead = 64

// ReasonHead is the stable head of a decision's reason, what metrics label and summaries count it
// by: the text before its detail — a ":", a " (" or a quote, after which reasons put positions,
// names and aliases that a client or a model chose — cut to MaxReasonHead bytes on a character
// boundary. Its values are bounded by the code and the operator's definitions, never by what a
// request or a model writes.
func ReasonHead(r string) string {
	if i := strings.IndexAny(r, `:"`); i >= 0 {
		r = r[:i]
	}
	if i := strings.Index(r, " ("); i >= 0 {
		r = r[:i]
	}
	r = strings.TrimRight(r, " ")
	if len(r) <= MaxReasonHead {
		return r
	}
	cut := MaxReasonHead
	for cut > 0 && !utf8.RuneStart(r[cut]) {
		cut--
	}
	return r[:cut]
}
