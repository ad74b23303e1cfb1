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
