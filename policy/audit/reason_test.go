package audit

import (
	"strings"
	"testing"
)

// A reason's head leaves out every detail a client or a model could choose, in the forms reasons
// carry it.
func TestReasonHead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ reason, want string }{
		{"tool not allowed", "tool not allowed"},
		{"arguments do not match schema: at #/properties/city: maxLength", "arguments do not match schema"},
		{"rule docs: url has an excluded host", "rule docs"},
		{"denied by the protocol (as web_search_20990101)", "denied by the protocol"},
		{"the protocol lacks the tool's scope (observer)", "the protocol lacks the tool's scope"},
		{`stored prompt "pmpt_u-1": its tools and instructions are applied upstream`, "stored prompt"},
		{strings.Repeat("é", 40), strings.Repeat("é", 32)},
	} {
		if got := ReasonHead(tc.reason); got != tc.want {
			t.Errorf("ReasonHead(%q) = %q, want %q", tc.reason, got, tc.want)
		}
	}
}
