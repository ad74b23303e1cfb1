package proxy

import "testing"

// TestNoticeCodeIsTheLastCodeShown: the code of a notice is its last code as a client reads codes
// (arguments that look like codes come before it); a notice without one has none.
func TestNoticeCodeIsTheLastCodeShown(t *testing.T) {
	t.Parallel()
	for notice, want := range map[string]string{
		`[promptgate] held tool call send_money for your confirmation: rule payee: iban does not occur in user. Arguments: ref="ABCD-EFGH". To run it once, reply with the code 7KQM-3XPA (valid for 10 minutes).`: "7KQM-3XPA",
		"reply with the code 7kqm-3xpa":                        "", // not as a notice writes it
		"reply with the code 7KQM-3XPU":                        "", // U is not of the alphabet
		"[promptgate] held tool call x for your confirmation.": "",
		"": "",
		"codes 0000-0000 and 1111-2222 (the last counts) 3333-4444": "3333-4444",
	} {
		if got := NoticeCode(notice); got != want {
			t.Errorf("NoticeCode(%q) = %q, want %q", notice, got, want)
		}
	}
}
