package proxy

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// Preview runs the surface of the path it is given, and refuses a path that is not a rewritten
// surface.
func TestPreviewPaths(t *testing.T) {
	e := testEngine(t, "", nil, nil, nil)
	ctx := context.Background()
	for path, body := range map[string]string{
		"":            `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		PathChat:      `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		PathResponses: `{"model":"m","input":"hi"}`,
		PathMessages:  `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		rep, err := e.Preview(ctx, Input{Path: path, Header: http.Header{}, Body: []byte(body)})
		if err != nil {
			t.Fatalf("%q: %v", path, err)
		}
		want, prompt := path, "upstreamRequest.messages.0.content"
		switch path {
		case "":
			want = PathChat
		case PathResponses:
			prompt = "upstreamRequest.instructions"
		case PathMessages:
			prompt = "upstreamRequest.system"
		}
		if gjson.GetBytes(rep, "path").String() != want || !gjson.GetBytes(rep, prompt).Exists() {
			t.Errorf("%q: %s", path, rep)
		}
	}
	for _, path := range []string{"/v1/embeddings", "/v1/models", "/v1/messages/count_tokens", "/admin/prompts/preview"} {
		_, err := e.Preview(ctx, Input{Path: path, Header: http.Header{}, Body: []byte(`{"model":"m","messages":[]}`)})
		status, body := APIError(err)
		if status != 400 || gjson.GetBytes(body, "error.code").String() != "invalid_request" || gjson.GetBytes(body, "error.param").String() != "path" {
			t.Errorf("%s: %d %s", path, status, body)
		}
	}
}

// TestPreviewResponsesContinuationExact: the preview of a Responses continuation whose previous
// response had a blocked call is, byte for byte, the body the upstream receives — the answer to the
// blocked call included.
func TestPreviewResponsesContinuationExact(t *testing.T) {
	u := newAPIUpstream(func(n int) []string {
		if n == 1 {
			return []string{fcItem("fc_evil", "call_evil", "web_fetch", respBadArgs, "completed")}
		}
		return []string{messageItem("msg_2", "ok")}
	})
	up := newUpstream(t, u.ServeHTTP)
	o, _ := vetOptions(t, up.URL, "refuse", "")
	ts := serveProxy(t, o)
	tools := `"tools":[{"type":"function","name":"web_fetch","parameters":{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}}]`
	if resp, b := postTo(t, ts, PathResponses, `{"model":"m","input":"go",`+tools+`}`, nil); resp.StatusCode != 200 || resp.Header.Get(HeaderBlocked) != "1" {
		t.Fatalf("first turn: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	next := `{"model":"m","previous_response_id":"resp_1","input":"and now?",` + tools + `}`
	report, err := o.Engine.Preview(context.Background(), Input{Path: PathResponses, Header: http.Header{}, Body: []byte(next)})
	if err != nil {
		t.Fatal(err)
	}
	if resp, b := postTo(t, ts, PathResponses, next, nil); resp.StatusCode != 200 {
		t.Fatalf("continuation: %d %s", resp.StatusCode, b)
	}
	sent := up.lastBody(t)
	if got := gjson.GetBytes(report, "upstreamRequest").Raw; got != string(sent) {
		t.Fatalf("the preview is not the body the upstream received:\npreview  %s\nupstream %s", got, sent)
	}
	if gjson.GetBytes(sent, `input.#(call_id=="call_evil").type`).Str != "function_call_output" {
		t.Fatalf("the blocked call was not answered: %s", sent)
	}
}

// TestPreviewFlow: for a protocol with information-flow rules, the preview says, on every surface,
// which sources of the request's conversation are trusted (the user's and the app's, not the
// document the model read), which rules apply to the kept tools and what they would do now, and the
// protocol's rules and trusted sources; a Responses request that continues a response this instance
// never relayed has its history marked unseen. A protocol without such rules has no flow section.
func TestPreviewFlow(t *testing.T) {
	t.Parallel()
	cc := newContinueCase(t)
	e := testEngine(t, "defaultProtocol: banking\n", nil, nil, []json.RawMessage{cc.protocol})
	ctx := context.Background()
	for _, sf := range flowtest.Surfaces {
		rep, err := e.Preview(ctx, Input{Path: flowPaths[sf], Header: http.Header{}, Body: flowRequest(t, sf, cc.turns, cc.tools, false, nil)})
		if err != nil {
			t.Fatalf("%s: %v", sf, err)
		}
		f := gjson.GetBytes(rep, "flow")
		trusted := map[string]bool{}
		f.Get("conversation.sources").ForEach(func(_, s gjson.Result) bool {
			trusted[s.Get("source").Str] = s.Get("trusted").Bool()
			return true
		})
		if f.Get("onViolation").Str != "continue" || !trusted["user"] || !trusted["app"] || trusted["tool:read_file"] ||
			trusted["assistant"] || f.Get("conversation.unseen").Exists() || f.Get("conversation.calls.read_file").Int() != 1 {
			t.Errorf("%s: conversation %s", sf, f.Raw)
		}
		rules := map[string]string{}
		f.Get("conversation.rules").ForEach(func(_, r gjson.Result) bool {
			rules[r.Get("rule").Str] = r.Get("state").Str
			return true
		})
		if rules["payee"] == "" || rules["payments"] != "0 of 3 calls used" || rules["password"] != "" {
			t.Errorf("%s: rules applied to the kept tools %v", sf, rules)
		}
		if !slices.Contains(stringsOf(f.Get("policy.trustedSources")), "tool:get_payees") || f.Get("policy.continueRounds").Int() != flow.DefaultContinueRounds ||
			len(f.Get("policy.rules").Array()) != 7 {
			t.Errorf("%s: policy %s", sf, f.Get("policy").Raw)
		}
	}
	rep, err := e.Preview(ctx, Input{Path: PathResponses, Header: http.Header{}, Body: []byte(`{"model":"m","previous_response_id":"resp_elsewhere","input":"pay it"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if !gjson.GetBytes(rep, "flow.conversation.unseen").Exists() {
		t.Errorf("a continuation out of sight: %s", gjson.GetBytes(rep, "flow").Raw)
	}
	plain := testEngine(t, "", nil, nil, nil)
	rep, err = plain.Preview(ctx, Input{Path: PathChat, Header: http.Header{}, Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)})
	if err != nil || gjson.GetBytes(rep, "flow").Exists() {
		t.Errorf("without rules: %v %s", err, gjson.GetBytes(rep, "flow").Raw)
	}
}

func stringsOf(v gjson.Result) []string {
	var out []string
	v.ForEach(func(_, s gjson.Result) bool {
		out = append(out, s.Str)
		return true
	})
	return out
}
