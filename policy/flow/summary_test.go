package flow_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/flow"
)

func TestRefusalText(t *testing.T) {
	t.Parallel()
	got := flow.RefusalText("send_email", "rule links: body: link 1 at offset 4 has a host that is not allowed")
	want := "[promptgate] The call of tool send_email was refused by policy and was not run: rule links: body: link 1 at offset 4 " +
		"has a host that is not allowed. It would be refused again with the same values. Go on with the user's request without it, " +
		"or tell the user what could not be done."
	if got != want {
		t.Fatalf("got %s", got)
	}
	if got := flow.RefusalText("a\nb", "r"); strings.ContainsAny(got, "\n") {
		t.Fatalf("a line break got through: %q", got)
	}
}

func TestExplainAndSummary(t *testing.T) {
	t.Parallel()
	p := mustCompile(t, `{"toolOutputs":{"trusted":["get_contacts"]},
	  "provenance":[{"id":"to","tool":"send_email","path":"to","as":"email","from":["user","tool:get_contacts"]}],
	  "scan":[{"id":"links","tool":"send_*","path":"body","find":["url"],"hosts":["acme.com"]}],
	  "budgets":[{"id":"mails","tool":"send_email","maxCalls":2}],
	  "flows":[{"id":"pay","after":["untrusted"],"tools":["pay_*"],"verdict":"confirm"}]}`)
	e := p.Explain()
	b, _ := json.Marshal(e)
	want := `{"trustedSources":["user","app","tool:get_contacts"],"rules":[` +
		`{"kind":"provenance","rule":"to","tools":["send_email"],"verdict":"block","summary":"to (email) must occur in user, tool:get_contacts"},` +
		`{"kind":"scan","rule":"links","tools":["send_*"],"verdict":"block","summary":"url found in body must have: hosts listed"},` +
		`{"kind":"budget","rule":"mails","tools":["send_email"],"verdict":"block","summary":"at most 2 calls per conversation"},` +
		`{"kind":"flow","rule":"pay","tools":["pay_*"],"verdict":"confirm","summary":"after output of untrusted is in the conversation"}],` +
		`"confirmTTL":"10m0s","continueRounds":2}`
	if string(b) != want {
		t.Errorf("explain\n got %s\nwant %s", b, want)
	}
	c := analyze(t, p, checkConversation, flow.Options{})
	s := c.Summary([]string{"send_email", "pay_bill", "search"})
	b, _ = json.Marshal(s)
	want = `{"sources":[{"source":"app","trusted":true,"segments":1,"chars":102},{"source":"user","trusted":true,"segments":1,"chars":85},` +
		`{"source":"tool:get_contacts","trusted":true,"segments":1,"chars":100},` +
		`{"source":"tool:read_file","trusted":false,"segments":1,"chars":169}],"calls":{"get_contacts":1,"read_file":1},"rules":[` +
		`{"kind":"provenance","rule":"to","tools":["send_email"],"state":"checks to against user, tool:get_contacts"},` +
		`{"kind":"scan","rule":"links","tools":["send_email"],"state":"scans body"},` +
		`{"kind":"budget","rule":"mails","tools":["send_email"],"state":"0 of 2 calls used"},` +
		`{"kind":"flow","rule":"pay","tools":["pay_bill"],"state":"triggered: untrusted output (tool:read_file) is in the conversation"}]}`
	if string(b) != want {
		t.Errorf("summary\n got %s\nwant %s", b, want)
	}
}
