package flow_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

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

// compact re-encodes JSON without white space, keeping key order, for comparisons.
func compact(t *testing.T, s string) string {
	t.Helper()
	return gjson.Get(s, "@ugly").Raw
}

func TestAppendTurn(t *testing.T) {
	t.Parallel()
	refusal := flow.RefusalText("send_email", "rule r: to does not occur in user")
	calls := []flow.Answered{{ID: "call_1", Tool: "send_email", Args: []byte(`{"to":"eve@evil.net"}`), Result: refusal}}
	for _, tc := range []struct {
		name string
		s    flow.Surface
		body string
		turn flow.Turn
		want string // compact JSON of the whole result
	}{
		{"chat built", flow.SurfaceChat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"x":1}`,
			flow.Turn{Text: "Sending.", Calls: calls},
			`{"model":"m","messages":[{"role":"user","content":"hi"},` +
				`{"role":"assistant","content":"Sending.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"send_email","arguments":"{\"to\":\"eve@evil.net\"}"}}]},` +
				`{"role":"tool","tool_call_id":"call_1","content":` + jsonString(refusal) + `}],"x":1}`},
		{"chat raw and legacy", flow.SurfaceChat, `{"messages":[]}`,
			flow.Turn{Raw: []byte(`{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}}`),
				Calls: []flow.Answered{{Tool: "f", Result: "no"}}},
			`{"messages":[{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},{"role":"function","name":"f","content":"no"}]}`},
		{"responses stateless, string input", flow.SurfaceResponses, `{"model":"m","input":"hi","store":false}`,
			flow.Turn{Calls: calls, ResponseID: "resp_1"},
			`{"model":"m","input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"call_1","name":"send_email","arguments":"{\"to\":\"eve@evil.net\"}"},` +
				`{"type":"function_call_output","call_id":"call_1","output":` + jsonString(refusal) + `}],"store":false}`},
		{"responses raw output appended", flow.SurfaceResponses, `{"input":[{"role":"user","content":"hi"}],"store":false}`,
			flow.Turn{Raw: []byte(`[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"send_email","arguments":"{}"}]`), Calls: calls},
			`{"input":[{"role":"user","content":"hi"},{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"send_email","arguments":"{}"},` +
				`{"type":"function_call_output","call_id":"call_1","output":` + jsonString(refusal) + `}],"store":false}`},
		{"responses stored: previous_response_id", flow.SurfaceResponses, `{"input":"hi","previous_response_id":"resp_0"}`,
			flow.Turn{Calls: calls, ResponseID: "resp_1"},
			`{"input":[{"type":"function_call_output","call_id":"call_1","output":` + jsonString(refusal) + `}],"previous_response_id":"resp_1"}`},
		{"responses conversation", flow.SurfaceResponses, `{"conversation":"conv_1","input":"hi"}`,
			flow.Turn{Calls: []flow.Answered{{ID: "c", Tool: "t", Custom: true, Args: []byte(`"ls"`), Result: "no"}}, ResponseID: "resp_1"},
			`{"conversation":"conv_1","input":[{"type":"custom_tool_call_output","call_id":"c","output":"no"}]}`},
		{"messages built", flow.SurfaceMessages, `{"model":"m","system":"s","messages":[{"role":"user","content":"hi"}]}`,
			flow.Turn{Text: "Sending.", Calls: calls},
			`{"model":"m","system":"s","messages":[{"role":"user","content":"hi"},` +
				`{"role":"assistant","content":[{"type":"text","text":"Sending."},{"type":"tool_use","id":"call_1","name":"send_email","input":{"to":"eve@evil.net"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":` + jsonString(refusal) + `,"is_error":true}]}]}`},
		{"messages raw", flow.SurfaceMessages, `{"messages":[{"role":"user","content":"hi"}]}`,
			flow.Turn{Raw: []byte(`[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"call_1","name":"send_email","input":{}}]`), Calls: calls},
			`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"tool_use","id":"call_1","name":"send_email","input":{}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":` + jsonString(refusal) + `,"is_error":true}]}]}`},
	} {
		out, err := flow.AppendTurn(tc.s, []byte(tc.body), tc.turn)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !gjson.ValidBytes(out) {
			t.Errorf("%s: invalid JSON %s", tc.name, out)
			continue
		}
		if got := compact(t, string(out)); got != compact(t, tc.want) {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, compact(t, tc.want))
		}
		// The result reads back as a conversation that holds the refusal as the call's output.
		p := mustCompile(t, `{}`)
		c, err := p.Analyze(tc.s, out, flow.Options{})
		if err != nil {
			t.Errorf("%s: analyze: %v", tc.name, err)
			continue
		}
		last := c.Segments()[len(c.Segments())-1]
		if last.Source.Kind != flow.SourceTool || last.Text != tc.turn.Calls[0].Result {
			t.Errorf("%s: last segment %+v", tc.name, last)
		}
	}
	for _, bad := range []struct {
		s    flow.Surface
		body string
		turn flow.Turn
	}{
		{flow.SurfaceChat, `{"messages":[]}`, flow.Turn{}},
		{flow.SurfaceChat, `{}`, flow.Turn{Calls: calls}},
		{flow.SurfaceMessages, `{"messages":{}}`, flow.Turn{Calls: calls}},
		{flow.SurfaceResponses, `{"input":7,"store":false}`, flow.Turn{Calls: calls}},
		{flow.SurfaceResponses, `{"input":[],"store":false}`, flow.Turn{Calls: calls, Raw: []byte(`{}`)}},
		{"x", `{}`, flow.Turn{Calls: calls}},
	} {
		if _, err := flow.AppendTurn(bad.s, []byte(bad.body), bad.turn); err == nil || !strings.HasPrefix(err.Error(), "flow: append turn: ") {
			t.Errorf("%s %s: %v", bad.s, bad.body, err)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
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
	c := analyze(t, p, flow.SurfaceChat, checkConversation, flow.Options{})
	s := c.Summary([]string{"send_email", "pay_bill", "search"})
	b, _ = json.Marshal(s)
	want = `{"sources":[{"source":"app","trusted":true,"segments":1,"chars":102},{"source":"user","trusted":true,"segments":1,"chars":85},` +
		`{"source":"assistant","trusted":false,"segments":2,"chars":0},{"source":"tool:get_contacts","trusted":true,"segments":1,"chars":100},` +
		`{"source":"tool:read_file","trusted":false,"segments":1,"chars":169}],"calls":{"get_contacts":1,"read_file":1},"rules":[` +
		`{"kind":"provenance","rule":"to","tools":["send_email"],"state":"checks to against user, tool:get_contacts"},` +
		`{"kind":"scan","rule":"links","tools":["send_email"],"state":"scans body"},` +
		`{"kind":"budget","rule":"mails","tools":["send_email"],"state":"0 of 2 calls used"},` +
		`{"kind":"flow","rule":"pay","tools":["pay_bill"],"state":"triggered: untrusted output (tool:read_file) is in the conversation"}]}`
	if string(b) != want {
		t.Errorf("summary\n got %s\nwant %s", b, want)
	}
}
