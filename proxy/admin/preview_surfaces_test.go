package admin

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy"
)

// Requests of the two other surfaces, with the client's own instructions, a tool the operator
// switches off, the promptgate extension, and fields promptgate does not know (which must survive
// byte for byte).
const (
	responsesRequest = `{"model":"gpt-4.1","instructions":"Be brief.","input":[{"role":"user","content":"hello"}],` +
		`"tools":[{"type":"function","name":"web_fetch","parameters":{"type":"object","properties":{"url":{"type":"string"}}}},` +
		`{"type":"function","name":"search_docs","parameters":{"type":"object"}}],` +
		`"promptgate":{"user":"u-1","context":{"ticket":"T-1"}},"x_unknown":{"keep":[1,2.50,"é"]}}`
	messagesRequest = `{"model":"claude-sonnet-4-5","max_tokens":256,"system":"Be brief.","messages":[{"role":"user","content":"hello"}],` +
		`"tools":[{"name":"web_fetch","input_schema":{"type":"object","properties":{"url":{"type":"string"}}}},` +
		`{"name":"search_docs","input_schema":{"type":"object"}}],` +
		`"promptgate":{"user":"u-1","context":{"ticket":"T-1"}},"x_unknown":{"keep":[1,2.50,"é"]}}`
)

// surfaceUpstream stands in for both upstreams: it keeps each body by path and answers a minimal
// reply of the surface.
type surfaceUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	bodies map[string][][]byte
}

func newSurfaceUpstream(t *testing.T) *surfaceUpstream {
	t.Helper()
	u := &surfaceUpstream{bodies: map[string][][]byte{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies[r.URL.Path] = append(u.bodies[r.URL.Path], b)
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/openai/responses":
			_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","model":"gpt-4.1","output":[]}`)
		case "/anthropic/messages":
			_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`)
		default:
			_, _ = io.WriteString(w, completionJSON)
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *surfaceUpstream) received(path string) [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.bodies[path]...)
}

// For each surface, the preview's upstreamRequest is byte for byte the body the upstream receives
// when the same request is sent to the proxy listener.
func TestPreviewEachSurfaceEqualsUpstreamBody(t *testing.T) {
	f := newFixture(t, fixtureOpts{token: "t"})
	up := newSurfaceUpstream(t)
	ou, _ := url.Parse(up.URL + "/openai")
	au, _ := url.Parse(up.URL + "/anthropic")
	s, err := proxy.New(proxy.Options{Engine: f.engine, Upstreams: map[string]proxy.Upstream{"openai": {URL: ou}, "anthropic": {URL: au}}, Audit: f.ring})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	f.ok(200, "PUT", "/admin/tools/search_docs/enabled", `{"enabled":false}`)

	for _, c := range []struct {
		path, upstreamPath, request, promptAt string
	}{
		{proxy.PathChat, "/openai/chat/completions", chatRequest, "messages.0.content"},
		{proxy.PathResponses, "/openai/responses", responsesRequest, "instructions"},
		{proxy.PathMessages, "/anthropic/messages", messagesRequest, "system"},
	} {
		t.Run(strings.TrimPrefix(c.path, "/v1/"), func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, ts.URL+c.path, strings.NewReader(c.request))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Promptgate-Protocol", "tech")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("proxy: %d %s", resp.StatusCode, b)
			}
			sent := up.received(c.upstreamPath)
			if len(sent) != 1 {
				t.Fatalf("upstream got %d requests at %s", len(sent), c.upstreamPath)
			}
			report := f.preview(c.request, "headers", `{"X-Promptgate-Protocol":"tech"}`, "path", `"`+c.path+`"`)
			got := gjson.GetBytes(report, "upstreamRequest").Raw
			if got != string(sent[0]) {
				t.Fatalf("preview differs from what the upstream received:\npreview:  %s\nupstream: %s", got, sent[0])
			}
			if gjson.GetBytes(report, "path").String() != c.path || gjson.GetBytes(report, "protocolId").String() != "tech" {
				t.Errorf("report %s", report)
			}
			if !strings.Contains(got, `"x_unknown":{"keep":[1,2.50,"é"]}`) || strings.Contains(got, `"promptgate"`) ||
				!strings.Contains(gjson.Get(got, c.promptAt).String(), "=== SYSTEM CORE ===") {
				t.Errorf("upstream body lost or kept the wrong fields, or no layered prompt at %s: %s", c.promptAt, got)
			}
			if gjson.GetBytes(report, "tools.kept").Raw != `["web_fetch"]` || gjson.GetBytes(report, "tools.removed.0.name").String() != "search_docs" {
				t.Errorf("tools %s / %s", gjson.GetBytes(report, "tools.kept").Raw, gjson.GetBytes(report, "tools.removed").Raw)
			}
		})
	}
}

func TestPreviewSurfaceBadForms(t *testing.T) {
	f := newFixture(t, fixtureOpts{token: "t"})
	for _, c := range []struct {
		body        string
		code, param string
	}{
		// Not a rewritten surface, or not a string.
		{`{"request":` + chatRequest + `,"path":"/v1/embeddings"}`, "invalid_request", "path"},
		{`{"request":` + chatRequest + `,"path":"/v1/chat/completions/"}`, "invalid_request", "path"},
		{`{"request":` + chatRequest + `,"path":"chat"}`, "invalid_request", "path"},
		{`{"request":` + chatRequest + `,"path":""}`, "invalid_request", "path"},
		{`{"request":` + chatRequest + `,"path":1}`, "invalid_request", "path"},
		// A body that is wrong for the surface named, answered as the proxy listener would.
		{`{"request":{"model":"m","input":5},"path":"/v1/responses"}`, "invalid_request", "input"},
		{`{"request":{"model":"m","instructions":["x"]},"path":"/v1/responses"}`, "invalid_request", "instructions"},
		{`{"request":` + responsesRequest + `,"path":"/v1/messages"}`, "invalid_request", "messages"},
		{`{"request":{"model":"m","messages":[],"system":5},"path":"/v1/messages"}`, "invalid_request", "system"},
		{`{"request":` + responsesRequest + `}`, "invalid_request", "messages"},
		{`{"request":{"model":"m","input":"hi","tool_choice":{"type":"function","name":"gone"}},"path":"/v1/responses"}`, "tool_choice_not_allowed", ""},
		{`{"request":{"model":"m","input":"a","input":"b"},"path":"/v1/responses"}`, "invalid_json", ""},
	} {
		e := f.fails(400, c.code, "POST", "/admin/prompts/preview", c.body)
		if c.param != "" && e.Get("param").String() != c.param {
			t.Errorf("%s: param %s, want %q", c.body, e.Get("param").Raw, c.param)
		}
	}
	// The same wrong body on the proxy listener gets the same answer.
	up := newSurfaceUpstream(t)
	ou, _ := url.Parse(up.URL + "/openai")
	s, err := proxy.New(proxy.Options{Engine: f.engine, Upstreams: map[string]proxy.Upstream{"openai": {URL: ou}, "anthropic": {URL: ou}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	resp, err := http.Post(ts.URL+proxy.PathResponses, "application/json", strings.NewReader(`{"model":"m","input":5}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := f.fails(400, "invalid_request", "POST", "/admin/prompts/preview", `{"request":{"model":"m","input":5},"path":"/v1/responses"}`)
	if resp.StatusCode != 400 || gjson.GetBytes(b, "error").Raw != want.Raw {
		t.Errorf("proxy answered %d %s; preview %s", resp.StatusCode, b, want.Raw)
	}
}
