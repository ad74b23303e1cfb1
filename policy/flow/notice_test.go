package flow_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/flow"
)

// noticeSpec holds a mail for confirmation when a recipient is in no trusted source, or the body
// links outside acme.com.
const noticeSpec = `{"provenance":[{"id":"mail-to","tool":"send_email","path":"to.#","as":"email","from":["user"],"verdict":"confirm","keyArgs":["to.#","subject"]}],
  "scan":[{"id":"links","tool":"send_email","path":"body","find":["url"],"hosts":["acme.com"],"verdict":"confirm","keyArgs":["body"]}]}`

var noticeConversation = []turn{{User: "Mail the team: a@acme.com, b@acme.com, c@acme.com, d@acme.com, e@acme.com."}}

// mail renders send_email's arguments.
func mail(t *testing.T, to []string, body string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"to": to, "subject": "Plan", "body": body})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestNoticeShowsBrokenValues: a notice shows every value that broke a rule, whole, named as the
// reason names it — the fourth recipient of a list whose key argument shows three, a link deep in a
// long body — and does not repeat one the key arguments show whole already.
func TestNoticeShowsBrokenValues(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, noticeSpec)
	cf, _ := flow.NewConfirmer(key32, nil, nil)
	long := strings.Repeat("Notes for the meeting. ", 10)
	for _, tc := range []struct {
		name  string
		args  []byte
		shown string // the notice from "Arguments: " up to " To run it once"
	}{
		{"the fourth recipient", mail(t, []string{"a@acme.com", "b@acme.com", "c@acme.com", "eve@evil.example"}, "hi"),
			`Arguments: to.#=["a@acme.com", "b@acme.com", "c@acme.com", …], subject="Plan". ` +
				`Values that broke the rule: to.# (value 4)="eve@evil.example".`},
		{"a recipient shown whole already", mail(t, []string{"a@acme.com", "eve@evil.example"}, "hi"),
			`Arguments: to.#=["a@acme.com", "eve@evil.example"], subject="Plan".`},
		{"several recipients past the third", mail(t, []string{"a@acme.com", "b@acme.com", "c@acme.com", "x@evil.example", "d@acme.com", "y@evil.example"}, "hi"),
			`Values that broke the rule: to.# (value 4)="x@evil.example", to.# (value 6)="y@evil.example".`},
		{"a link deep in a long body", mail(t, []string{"a@acme.com"}, long+"Log in at https://evil.example/login now."),
			`Arguments: body="` + long[:80] + `"…. ` +
				`Values that broke the rule: body: link 1 at offset 240="https://evil.example/login".`},
		{"both rules", mail(t, []string{"a@acme.com", "b@acme.com", "c@acme.com", "eve@evil.example"}, "see https://evil.example/x"),
			`Values that broke the rules: to.# (value 4)="eve@evil.example", body: link 1 at offset 4="https://evil.example/x".`},
	} {
		c := analyze(t, p, noticeConversation, flow.Options{Confirmer: cf})
		r := c.Check(flow.Call{Tool: "send_email", Args: tc.args})
		if r.Verdict != flow.VerdictHeld {
			t.Errorf("%s: %+v", tc.name, r)
			continue
		}
		if !strings.Contains(r.Notice, tc.shown) {
			t.Errorf("%s: notice\n%s\nwant it to hold\n%s", tc.name, r.Notice, tc.shown)
		}
		if strings.Count(r.Notice, "eve@evil.example") > 1 {
			t.Errorf("%s: a value shown twice: %s", tc.name, r.Notice)
		}
		for _, d := range r.Decisions {
			assertNoValues(t, string(tc.args), d.Reason)
		}
	}
}

// TestNoticeBoundBlocks: values that broke a rule asking for confirmation are shown up to 16, each
// up to 256 characters; a call whose values do not fit, or one that is an object, is blocked (a
// user cannot confirm what a notice cannot show), with a reason that names the rule and quotes no
// value.
func TestNoticeBoundBlocks(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, noticeSpec)
	cf, _ := flow.NewConfirmer(key32, nil, nil)
	evil := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("eve%d@evil.example", i))
		}
		return out
	}
	longAddr := strings.Repeat("e", 64) + "@" + strings.Repeat("x", 60) + "." + strings.Repeat("y", 60) + ".example"
	links := strings.Repeat("https://evil.example/a ", 17)
	for _, tc := range []struct {
		name    string
		args    []byte
		verdict string
		reason  string
	}{
		{"16 recipients", mail(t, evil(16), "hi"), flow.VerdictHeld, ""},
		{"17 recipients", mail(t, evil(17), "hi"), flow.VerdictBlocked,
			"rule mail-to: more values broke the rules than a notice shows (16): a call the user cannot see cannot be confirmed"},
		{"17 links", mail(t, []string{"a@acme.com"}, links), flow.VerdictBlocked, "rule links: more values broke the rules than a notice shows (16)"},
		{"9 recipients and 8 links", mail(t, evil(9), links[:8*len("https://evil.example/a ")]), flow.VerdictBlocked, "more values broke the rules than a notice shows (16)"},
		{"a long address", mail(t, []string{longAddr}, "hi"), flow.VerdictHeld, ""},
		{"a link of 300 characters", mail(t, []string{"a@acme.com"}, "https://evil.example/"+strings.Repeat("p", 280)), flow.VerdictBlocked,
			"rule links: body: link 1 at offset 0 is longer than a notice shows (256 characters)"},
		{"an object where an address should be", []byte(`{"to":[{"addr":"eve@evil.example"}],"subject":"Plan","body":"hi"}`), flow.VerdictBlocked,
			"rule mail-to: to.# is an object"},
	} {
		c := analyze(t, p, noticeConversation, flow.Options{Confirmer: cf})
		r := c.Check(flow.Call{Tool: "send_email", Args: tc.args})
		if r.Verdict != tc.verdict || !strings.Contains(r.Reason, tc.reason) {
			t.Errorf("%s: %s %q, want %s %q", tc.name, r.Verdict, r.Reason, tc.verdict, tc.reason)
			continue
		}
		if tc.verdict == flow.VerdictBlocked {
			if r.Notice != "" || !strings.HasSuffix(kinds(r.Decisions), "confirm/blocked") || strings.Contains(kinds(r.Decisions), "held") {
				t.Errorf("%s: %+v", tc.name, r)
			}
			for _, d := range r.Decisions {
				assertNoValues(t, string(tc.args), d.Reason)
			}
			continue
		}
		var to []string
		if err := json.Unmarshal(tc.args, &map[string]any{"to": &to}); err != nil {
			t.Fatal(err)
		}
		for _, addr := range to {
			if !strings.Contains(r.Notice, `"`+addr+`"`) {
				t.Errorf("%s: the notice does not show %s: %s", tc.name, addr, r.Notice)
			}
		}
		if len(r.Notice) > 16*300+1000 {
			t.Errorf("%s: a notice of %d bytes", tc.name, len(r.Notice))
		}
	}
}

// TestManyTrustedSources: with more distinct sources than the index has bits, a value in any
// trusted one is found and a value in an untrusted one past the 63rd is not.
func TestManyTrustedSources(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"toolOutputs":{"trusted":["get_*"]},
	  "provenance":[{"id":"r","tool":"send","path":"to","as":"email","from":["trusted"]}]}`)
	turns := []turn{{User: "go"}}
	for i := range 200 {
		tool := fmt.Sprintf("get_%d", i)
		if i%2 == 1 {
			tool = fmt.Sprintf("read_%d", i)
		}
		id := fmt.Sprintf("c%d", i)
		turns = append(turns, turn{Calls: []neutralCall{{ID: id, Tool: tool}}}, turn{Tool: id, Output: fmt.Sprintf("write to u%d@x.example", i)})
	}
	c := analyze(t, p, turns, flow.Options{})
	for _, i := range []int{0, 2, 62, 64, 150, 198} {
		if r := c.Check(flow.Call{Tool: "send", Args: fmt.Appendf(nil, `{"to":"u%d@x.example"}`, i)}); r.Verdict != flow.VerdictAllowed {
			t.Errorf("a value of trusted source %d: %+v", i, r)
		}
	}
	for _, i := range []int{1, 63, 65, 151, 199} {
		if r := c.Check(flow.Call{Tool: "send", Args: fmt.Appendf(nil, `{"to":"u%d@x.example"}`, i)}); r.Verdict != flow.VerdictBlocked {
			t.Errorf("a value of untrusted source %d: %+v", i, r)
		}
	}
}
