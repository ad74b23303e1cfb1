package responses

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
)

// Hosted MCP (tools of type mcp, which the upstream runs) under a protocol with mcp.vetHostedCalls:
// the rewrite makes every such tool ask for approval of every call (approveAlways), and promptgate
// answers the upstream's approval requests itself. Each mcp_approval_request is vetted as a call of
// tool "mcp" with its arguments — the allowlist, the argument rules and the information-flow rules
// of any call of "mcp" — and answered with an mcp_approval_response (approve true where it passes,
// false with the reason otherwise); the upstream is asked again with the answers and the client
// gets the answers joined, the approval requests left out, a denied call's notice in its place, in
// a non-stream answer (hostedBody) and in a stream (Stream.Hosted) alike. The client never sees an
// approval request, so it cannot approve one: where promptgate cannot answer them (a call of the
// same turn that reaches the client or is held, no round left, the next request too large, the
// upstream failing), the requests are left unanswered, each replaced by a notice, and their calls
// do not run.

const (
	// hostedMCP is the tool type of hosted MCP servers, and the name their calls are vetted under.
	hostedMCP = "mcp"
	// typeApproval is the item the upstream asks for an approval with.
	typeApproval = "mcp_approval_request"
	// reasonUnanswered: the approval request was not answered, for the turn could not be continued.
	reasonUnanswered = "its approval request was not answered, as the turn could not be continued"
)

// approvalCall reads an mcp_approval_request item as the call it asks to run: tool "mcp", the
// item's id (the approval_request_id to answer), its arguments (a JSON text).
func approvalCall(index int, it gjson.Result) *vet.Call {
	call := &vet.Call{Index: index}
	if id := it.Get(pathID); id.Type == gjson.String {
		call.ID = id.Str
	}
	call.AddName(hostedMCP)
	switch args := it.Get(pathArguments); {
	case args.Type == gjson.String:
		call.AppendArgs(args.Str)
	case args.Exists() && args.Type != gjson.Null:
		call.Fail(vet.ReasonNotString)
	}
	if call.ID == "" {
		call.Fail(ReasonChanged) // an approval request without its id cannot be answered
	}
	return call
}

// approvalAnswer is promptgate's answer to an approval request: approve where the call passed, else
// deny with the refusal (which names the rule, never the arguments), or, for a call held for the
// user's confirmation, with the words that it waits (the notice with the code goes to the client,
// which a later call confirms).
func approvalAnswer(call *vet.Call, d vet.Decision) relay.Answered {
	a := relay.Answer(call, d, false) // a held call: that it waits for the user, never the code
	a.Approval, a.Approve = true, !d.Blocked()
	if a.Approve {
		a.Result = ""
	}
	return a
}

// approvalResponse is the input item that answers an approval request.
func approvalResponse(a relay.Answered) []byte {
	b := []byte(`{"type":"mcp_approval_response","approval_request_id":"","approve":false}`)
	b, _ = sjson.SetBytes(b, "approval_request_id", a.ID)
	b, _ = sjson.SetBytes(b, "approve", a.Approve)
	if !a.Approve && a.Result != "" {
		b, _ = sjson.SetBytes(b, "reason", a.Result)
	}
	return b
}

// approvalNotice is the notice that takes the place of an approval request promptgate denied (or
// held for the user's confirmation: the notice carries the code).
func approvalNotice(d vet.Decision, label string) string {
	return vet.Notice(d) + " (hosted MCP call " + label + ")"
}

// unansweredNotice is the notice that takes the place of an approval request promptgate let pass
// but could not answer: its call does not run.
func unansweredNotice(label string) string {
	return fmt.Sprintf("[promptgate] hosted MCP call %s not run: %s.", label, reasonUnanswered)
}

// serverLabel names an approval request's call for a notice: the server's label and the MCP tool's
// name.
func serverLabel(it gjson.Result) string {
	return strings.TrimSpace(it.Get("server_label").String() + "/" + it.Get(pathName).String())
}

// hasApproval reports whether a response body's output holds an approval request.
func hasApproval(body []byte) bool {
	found := false
	gjson.GetBytes(body, pathOutput).ForEach(func(_, it gjson.Result) bool {
		found = it.Get(pathType).Str == typeApproval
		return !found
	})
	return found
}

// hostedBody vets a non-stream answer whose approval requests promptgate answers (vetHostedCalls):
// the function calls as Body does, the approval requests as calls of "mcp". Where every function
// call of the turn is one promptgate answers itself (none, or each blocked in continue mode),
// Result.Continue carries the turn with every answer for Rounds to ask the upstream again; the body
// written is what the client gets when the turn is not continued: the approval requests replaced by
// notices (their calls do not run).
func hostedBody(body []byte, c *vet.Checker, rec relay.Recorder) ([]byte, relay.Result, error) {
	var res relay.Result
	if err := checkBody(body); err != nil {
		return body, res, err
	}
	output := gjson.GetBytes(body, pathOutput)
	if !output.IsArray() {
		return body, res, nil
	}
	items := output.Array()
	var calls []*vet.Call
	var at []int
	approval := map[int]bool{}
	for i, it := range items {
		call := itemCall(c, i, it)
		if typ := it.Get(pathType).Str; typ == typeApproval {
			call, approval[i] = approvalCall(i, it), true
		}
		if call != nil {
			calls, at = append(calls, call), append(at, i)
		}
	}
	if len(approval) == 0 {
		return Body(body, c, rec)
	}
	ds := res.Vet(c, rec, calls)
	if res.ErrorCall != nil {
		return body, res, nil
	}
	drop := map[int]bool{}
	notice := map[int]string{}
	answerable := true
	t := relay.Turn{Raw: []byte(output.Raw), ResponseID: gjson.GetBytes(body, pathID).String()}
	for i, call := range calls {
		pos, d := at[i], ds[i]
		switch {
		case approval[pos]:
			drop[pos] = true
			t.Calls = append(t.Calls, approvalAnswer(call, d))
			if d.Blocked() {
				notice[pos] = approvalNotice(d, serverLabel(items[pos]))
			}
		case d.Blocked():
			drop[pos] = true
			notice[pos] = vet.Notice(d)
			typ := items[pos].Get(pathType).Str
			if !relay.Answerable(c, call, d) || typ != typeFunction && typ != typeCustomTool || d.Verdict == vet.VerdictHeld {
				answerable = false
			} else {
				t.Calls = append(t.Calls, relay.Answer(call, d, typ == typeCustomTool))
			}
		default:
			answerable = false // a call that reaches the client: the turn is the client's to go on with
		}
	}
	dropLeads(items, drop)
	var kept, shown []string // kept: when continued; shown: when not
	for pos, it := range items {
		if !drop[pos] {
			kept, shown = append(kept, it.Raw), append(shown, it.Raw)
			continue
		}
		switch {
		case approval[pos] && notice[pos] != "":
			n := string(noticeItem(newNoticeID(), notice[pos], true))
			kept, shown = append(kept, n), append(shown, n)
		case approval[pos]:
			shown = append(shown, string(noticeItem(newNoticeID(), unansweredNotice(serverLabel(it)), true)))
		case notice[pos] != "":
			shown = append(shown, string(noticeItem(newNoticeID(), notice[pos], true)))
		}
	}
	if answerable {
		res.Continue = &relay.Continuation{Turn: t, Kept: relay.JoinArray(kept)}
	}
	out, err := sjson.SetRawBytes(body, pathOutput, relay.JoinArray(shown))
	if err != nil {
		return body, res, fmt.Errorf("responses: edit output: %w", err)
	}
	return out, res, nil
}
