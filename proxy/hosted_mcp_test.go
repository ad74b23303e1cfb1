package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// hostedProtocol allows hosted MCP (tool "mcp") under an argument rule on the address its calls
// mail, and has promptgate answer the approval requests of hosted MCP calls when vet is set.
func hostedProtocol(vet bool) json.RawMessage {
	p := `{"id":"hosted","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["mcp"]},` +
		`"toolCalls":{"rules":[{"id":"acme-only","tool":"mcp","path":"to","pattern":"@acme\\.com$"}]}`
	if vet {
		p += `,"mcp":{"vetHostedCalls":true}`
	}
	return json.RawMessage(p + `}`)
}

// hostedRequest is a Responses request with a hosted MCP server that never asks for approval.
const hostedRequest = `{"model":"m","input":"mail ann and eve the summary","tools":[{"type":"mcp","server_label":"crm",` +
	`"server_url":"https://crm.example.com/mcp","require_approval":"never"}]}`

// approvalItem is an mcp_approval_request of send_email to address.
func approvalItem(id, to string) string {
	return `{"type":"mcp_approval_request","id":"` + id + `","server_label":"crm","name":"send_email","arguments":"{\"to\":\"` + to + `\"}"}`
}

// hostedUpstream answers the first request with approval requests for ann (allowed) and eve
// (refused), and a request that answers them with the call it ran for each approved one and a
// message, as JSON.
func hostedUpstream(t *testing.T) *upstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var out, id string
		if approvals := gjson.GetBytes(b, `input.#(type=="mcp_approval_response")#`); len(approvals.Array()) > 0 {
			id = "resp_2"
			approvals.ForEach(func(_, a gjson.Result) bool {
				if a.Get("approve").Bool() {
					out += `{"type":"mcp_call","id":"mcp_` + a.Get("approval_request_id").Str + `","server_label":"crm","name":"send_email",` +
						`"arguments":"{}","output":"sent"},`
				}
				return true
			})
			out += `{"type":"message","id":"msg_2","role":"assistant","status":"completed","content":[{"type":"output_text","text":"done","annotations":[]}]}`
		} else {
			id = "resp_1"
			out = approvalItem("mcpr_ann", "ann@acme.com") + "," + approvalItem("mcpr_eve", "eve@evil.example")
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"`+id+`","object":"response","status":"completed","model":"m","output":[`+out+`],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`)
	})
}

// TestHostedMCPApprovalsAnsweredByPromptgate: with mcp.vetHostedCalls, the request's hosted MCP
// tools ask for approval of every call; promptgate vets each approval request as a call of tool
// "mcp" (the argument rule refuses eve's), answers both itself — approve for ann, deny with the
// rule for eve — and asks the upstream again, stored (previous_response_id and the answers) or
// stateless (the turn and the answers appended); the client gets the joined answer: the call that
// ran, the denial's notice, the message, and no approval request.
func TestHostedMCPApprovalsAnsweredByPromptgate(t *testing.T) {
	t.Parallel()
	for _, store := range []bool{true, false} {
		t.Run(map[bool]string{true: "stored", false: "stateless"}[store], func(t *testing.T) {
			t.Parallel()
			up := hostedUpstream(t)
			ts, rec := flowServer(t, up.URL, hostedProtocol(true))
			req := hostedRequest
			if !store {
				req = strings.Replace(req, `"model":"m",`, `"model":"m","store":false,`, 1)
			}
			status, h, b := post(t, ts, flowtest.Responses, []byte(req), nil)
			if status != http.StatusOK {
				t.Fatalf("status %d: %s", status, b)
			}
			up.mu.Lock()
			bodies := append([][]byte(nil), up.bodies...)
			up.mu.Unlock()
			if len(bodies) != 2 {
				t.Fatalf("%d upstream requests, want 2", len(bodies))
			}
			if got := gjson.GetBytes(bodies[0], "tools.0.require_approval").String(); got != "always" {
				t.Errorf("the hosted tool's require_approval went upstream as %q, want always", got)
			}
			second := gjson.ParseBytes(bodies[1])
			answers := second.Get(`input.#(type=="mcp_approval_response")#`).Array()
			if len(answers) != 2 || answers[0].Get("approval_request_id").Str != "mcpr_ann" || !answers[0].Get("approve").Bool() ||
				answers[1].Get("approval_request_id").Str != "mcpr_eve" || answers[1].Get("approve").Bool() ||
				!strings.Contains(answers[1].Get("reason").Str, "acme-only") || strings.Contains(answers[1].Raw, "eve@") {
				t.Fatalf("answers sent upstream: %s", second.Get("input").Raw)
			}
			if store != (second.Get("previous_response_id").Str == "resp_1") {
				t.Errorf("previous_response_id %q (stored %v)", second.Get("previous_response_id").Str, store)
			}
			if !store && len(second.Get(`input.#(type=="mcp_approval_request")#`).Array()) != 2 {
				t.Errorf("a stateless continuation lacks the approval requests it answers: %s", second.Get("input").Raw)
			}
			out := gjson.GetBytes(b, "output")
			if strings.Contains(out.Raw, "mcp_approval_request") || strings.Contains(out.Raw, "eve@evil") {
				t.Fatalf("the client got an approval request or the refused argument: %s", out.Raw)
			}
			var kinds []string
			out.ForEach(func(_, it gjson.Result) bool {
				kinds = append(kinds, it.Get("type").Str)
				return true
			})
			if strings.Join(kinds, ",") != "message,mcp_call,message" || !strings.Contains(out.Get("0.content.0.text").Str, "blocked tool call mcp") ||
				out.Get("1.id").Str != "mcp_mcpr_ann" || gjson.GetBytes(b, "id").Str != "resp_2" {
				t.Fatalf("output %s", out.Raw)
			}
			if h.Get(HeaderContinued) != "1" {
				t.Errorf("%s = %q", HeaderContinued, h.Get(HeaderContinued))
			}
			if v := rec.verdicts()["tool_call/mcp"]; v == "" {
				t.Errorf("no tool_call decision on mcp: %v", rec.verdicts())
			}
		})
	}
}

// TestHostedMCPWithoutVetting: without mcp.vetHostedCalls, hosted MCP is governed as before: the
// client's require_approval goes upstream as it is, and the approval requests reach the client.
func TestHostedMCPWithoutVetting(t *testing.T) {
	t.Parallel()
	up := hostedUpstream(t)
	ts, _ := flowServer(t, up.URL, hostedProtocol(false))
	status, _, b := post(t, ts, flowtest.Responses, []byte(hostedRequest), nil)
	if status != http.StatusOK || len(gjson.GetBytes(b, `output.#(type=="mcp_approval_request")#`).Array()) != 2 {
		t.Fatalf("%d %s", status, b)
	}
	if got := gjson.GetBytes(up.lastBody(t), "tools.0.require_approval").String(); got != "never" {
		t.Errorf("require_approval went upstream as %q", got)
	}
}

// TestHostedMCPInABackgroundResponse: a background response is retrieved later, where promptgate
// cannot continue it: with mcp.vetHostedCalls its approval requests are left unanswered, each
// replaced by a notice, in a retrieval as JSON and as a stream.
func TestHostedMCPInABackgroundResponse(t *testing.T) {
	t.Parallel()
	done := `{"id":"resp_bg","object":"response","status":"completed","model":"m","output":[` + approvalItem("mcpr_ann", "ann@acme.com") + `]}`
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			_, _ = io.WriteString(w, `{"id":"resp_bg","object":"response","status":"queued","model":"m","output":[]}`)
			return
		}
		if r.URL.Query().Get("stream") == "true" {
			w.Header().Set("Content-Type", "text/event-stream")
			writeSplit(w, "event: response.completed\ndata: "+`{"type":"response.completed","sequence_number":0,"response":`+done+"}\n\n", 29)
			return
		}
		_, _ = io.WriteString(w, done)
	})
	ts, _ := flowServer(t, up.URL, hostedProtocol(true))
	req := strings.Replace(hostedRequest, `"model":"m",`, `"model":"m","background":true,`, 1)
	if status, _, b := post(t, ts, flowtest.Responses, []byte(req), nil); status != http.StatusOK {
		t.Fatalf("create: %d %s", status, b)
	}
	for _, q := range []string{"", "?stream=true"} {
		resp, err := ts.Client().Get(ts.URL + "/v1/responses/resp_bg" + q)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.Contains(string(b), `"type":"mcp_approval_request"`) || !strings.Contains(string(b), "not run") && !strings.Contains(string(b), "blocked tool call mcp") {
			t.Errorf("retrieval%s: %d %s", q, resp.StatusCode, b)
		}
	}
}
