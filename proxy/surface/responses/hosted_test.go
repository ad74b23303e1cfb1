package responses

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
)

// hostedChecker allows get_weather (which needs a city) and hosted MCP, whose calls may mail
// acme.com only.
func hostedChecker(t *testing.T, mode vet.Mode) *vet.Checker {
	t.Helper()
	rules, err := vet.CompileRules([]vet.Rule{{ID: "acme-only", Tool: hostedMCP, Path: "to", Check: vet.Check{Pattern: `@acme\.com$`}}})
	if err != nil {
		t.Fatal(err)
	}
	return vet.NewChecker(vet.Policy{Allowed: map[string]bool{"get_weather": true, hostedMCP: true}, Rules: rules, Mode: mode,
		Schemas: map[string][]byte{"get_weather": []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}})
}

const (
	approveAnn = `{"type":"mcp_approval_request","id":"mcpr_ann","server_label":"crm","name":"send_email","arguments":"{\"to\":\"ann@acme.com\"}"}`
	approveEve = `{"type":"mcp_approval_request","id":"mcpr_eve","server_label":"crm","name":"send_email","arguments":"{\"to\":\"eve@evil.example\"}"}`
)

func hostedResponse(items ...string) []byte {
	return []byte(`{"id":"resp_1","object":"response","status":"completed","output":[` + strings.Join(items, ",") + `]}`)
}

// TestHostedBodyTurns: which turns promptgate answers itself. A turn of approval requests alone is
// continued with an answer for each (approve for the call that passes, deny for the one the rule
// refuses); a turn where a function call reaches the client is not, and every approval request is
// left unanswered, each replaced by a notice, so that no call runs the client could approve; in
// continue mode, a turn whose function call is refused is continued with the refusal and the
// approvals.
func TestHostedBodyTurns(t *testing.T) {
	t.Parallel()
	weather := fnItem("fc_1", "call_1", "get_weather", `{"city":"Paris"}`, "completed")
	badWeather := fnItem("fc_2", "call_2", "get_weather", `{"town":"Paris"}`, "completed")
	for _, c := range []struct {
		name      string
		mode      vet.Mode
		items     []string
		continued string // the answers of the continuation, "" for none
		shown     string // the types the client gets when the turn is not continued
	}{
		{"approvals alone", vet.ModeRefuse, []string{approveAnn, approveEve}, "mcpr_ann:approve,mcpr_eve:deny", "message,message"},
		{"a function call reaches the client", vet.ModeRefuse, []string{weather, approveAnn}, "", "function_call,message"},
		{"a refused function call in refuse mode", vet.ModeRefuse, []string{badWeather, approveAnn}, "", "message,message"},
		{"a refused function call in continue mode", vet.ModeContinue, []string{badWeather, approveAnn}, "call_2:output,mcpr_ann:approve", "message,message"},
	} {
		body := hostedResponse(c.items...)
		out, res, err := hostedBody(body, hostedChecker(t, c.mode), nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var types []string
		gjson.GetBytes(out, "output").ForEach(func(_, it gjson.Result) bool {
			types = append(types, it.Get("type").Str)
			return true
		})
		if strings.Join(types, ",") != c.shown || strings.Contains(string(out), "mcp_approval_request") {
			t.Errorf("%s: shown %v: %s", c.name, types, out)
		}
		var answers []string
		if res.Continue != nil {
			for _, a := range res.Continue.Turn.Calls {
				kind := "output"
				if a.Approval {
					kind = map[bool]string{true: "approve", false: "deny"}[a.Approve]
				}
				answers = append(answers, a.ID+":"+kind)
			}
		}
		if strings.Join(answers, ",") != c.continued {
			t.Errorf("%s: continued with %v, want %q", c.name, answers, c.continued)
		}
	}
}

// TestHostedAnswersAppended: the continuation of a stored response sends the answers alone after
// previous_response_id; a stateless one appends the turn (the approval requests) and the answers; a
// denial carries the refusal, never the arguments.
func TestHostedAnswersAppended(t *testing.T) {
	t.Parallel()
	body := hostedResponse(approveAnn, approveEve)
	_, res, err := hostedBody(body, hostedChecker(t, vet.ModeRefuse), nil)
	if err != nil || res.Continue == nil {
		t.Fatalf("%v %+v", err, res)
	}
	stored, err := appendTurn([]byte(`{"model":"m","input":"mail them"}`), res.Continue.Turn)
	if err != nil {
		t.Fatal(err)
	}
	if gjson.GetBytes(stored, "previous_response_id").Str != "resp_1" || len(gjson.GetBytes(stored, "input").Array()) != 2 ||
		gjson.GetBytes(stored, "input.1.approve").Bool() || !strings.Contains(gjson.GetBytes(stored, "input.1.reason").Str, "acme-only") ||
		strings.Contains(string(stored), "eve@") {
		t.Errorf("stored continuation %s", stored)
	}
	stateless, err := appendTurn([]byte(`{"model":"m","store":false,"input":"mail them"}`), res.Continue.Turn)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	gjson.GetBytes(stateless, "input").ForEach(func(_, it gjson.Result) bool {
		types = append(types, it.Get("type").Str)
		return true
	})
	if strings.Join(types, ",") != ",mcp_approval_request,mcp_approval_request,mcp_approval_response,mcp_approval_response" {
		t.Errorf("stateless continuation %v", types)
	}
}

// TestApproveAlways: every hosted MCP tool asks for approval of every call, whatever the client's
// require_approval (absent, never, an object), a type in another case included; other tools stay.
func TestApproveAlways(t *testing.T) {
	t.Parallel()
	body := []byte(`{"tools":[{"type":"mcp","server_label":"a"},{"type":"mcp","server_label":"b","require_approval":"never"},` +
		`{"type":"MCP","server_label":"c","require_approval":{"never":{"tool_names":["x"]}}},{"type":"function","name":"f"}]}`)
	out, err := approveAlways(body)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"always", "always", "always", ""} {
		if got := gjson.GetBytes(out, "tools."+itoa(i)+".require_approval").String(); got != want {
			t.Errorf("tools[%d].require_approval = %q, want %q", i, got, want)
		}
	}
}

// TestAnswerBlockedDeniesApprovals: a request continuing a response whose approval requests
// promptgate blocked denies them at the front of its input, and a client's own approval of one
// becomes a denial.
func TestAnswerBlockedDeniesApprovals(t *testing.T) {
	t.Parallel()
	calls := []blockedCall{{CallID: "mcpr_ann", Tool: hostedMCP, Reason: vet.ReasonNotAllowed, Approval: true},
		{CallID: "mcpr_eve", Tool: hostedMCP, Reason: vet.ReasonNotAllowed, Approval: true}}
	body := []byte(`{"previous_response_id":"resp_1","input":[{"type":"mcp_approval_response","approval_request_id":"mcpr_ann","approve":true}]}`)
	out, n, err := answerBlocked(body, calls)
	if err != nil || n == 0 {
		t.Fatalf("%d %v", n, err)
	}
	answers := gjson.GetBytes(out, `input.#(type=="mcp_approval_response")#`).Array()
	if len(answers) != 2 {
		t.Fatalf("%s", out)
	}
	for _, a := range answers {
		if a.Get("approve").Type != gjson.False {
			t.Errorf("not a denial: %s", a.Raw)
		}
	}
	if strings.Contains(string(out), "function_call_output") {
		t.Errorf("an approval request answered as a function call: %s", out)
	}
}
