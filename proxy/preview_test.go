package proxy

import (
	"context"
	"net/http"
	"testing"

	"github.com/tidwall/gjson"
)

// Preview runs the surface of the path it is given, and refuses a path that is not a rewritten surface.
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

// TestPreviewResponsesContinuationExact: the preview of a Responses continuation whose previous response had a
// blocked call is, byte for byte, the body the upstream receives — the answer to the blocked call included.
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
