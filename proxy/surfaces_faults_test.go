package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// A surface of the proxy, with a streamed answer cut in the middle of a tool call: prefix is what
// the upstream sends before the fault. The call's id holds "secret" and its arguments "Oslo":
// neither may reach the client.
type faultSurface struct {
	name, path, body, prefix string
}

func faultSurfaces() []faultSurface {
	resp := (&respEvents{}).created().text(0, "checking ").call(1, "fc_secret", "call_secret", "get_weather", respGoodArgs).completed()
	anth := (&anthEvents{}).start().text(0, "checking ").tool(1, "toolu_secret", "get_weather", anthGood).end("tool_use")
	return []faultSurface{
		{"chat", PathChat, streamVetRequest,
			"data: " + chunk(`{"role":"assistant","content":"checking "}`, "") + "\n\n" + "data: " + toolDelta("call_secret", "get_weather", `{"city":"Oslo"`) + "\n\n"},
		{"responses", PathResponses,
			`{"model":"m","stream":true,"input":"go","tools":[{"type":"function","name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}`,
			resp[:strings.Index(resp, "event: response.function_call_arguments.done")]},
		{"messages", PathMessages,
			`{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"go"}],"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]}`,
			anth[:strings.Index(anth, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1")]},
		// Gemini sends a call whole, in one event: the fault cuts that event.
		{"gemini", "/v1beta/models/m:streamGenerateContent?alt=sse",
			`{"contents":[{"role":"user","parts":[{"text":"go"}]}],"tools":[{"functionDeclarations":[{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}]}]}`,
			"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"checking \"}]},\"index\":0}],\"responseId\":\"r1\"}\r\n\r\n" +
				"data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"functionCall\":{\"id\":\"call_secret\",\"name\":\"get_weather\",\"args\":{\"city\":\"Oslo\""},
	}
}

// Upstream timeouts of the fault tests. A stall is detected after faultStallTimeout; the upstream's
// writes before it follow each other at once, so a second leaves a loaded machine ample room. Where
// the fault is a reset, the timeout is not under test and must not fire first: faultNoTimeout.
const (
	faultStallTimeout = "1s"
	faultNoTimeout    = "60s"
)

// newFaultProxy serves the guarded protocol with both upstreams on h and the given upstream
// timeout.
func newFaultProxy(t *testing.T, timeout string, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	up := newUpstream(t, h)
	e := testEngine(t, "defaultProtocol: guarded\nlimits: {upstreamTimeout: "+timeout+"}\n", nil, nil, []json.RawMessage{vetProtocol("refuse")})
	u, _ := url.Parse(up.URL + "/v1")
	gu, _ := url.Parse(up.URL)
	s, err := New(Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: u}, "gemini": {URL: gu}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

func send(t *testing.T, method, url, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// Every rewritten surface ends a stream broken or stalled in the middle of a tool call the same
// way: what was vetted, then its error event with upstream_stream_truncated, and no byte of the
// unfinished call.
func TestFaultStreamCutOnEverySurface(t *testing.T) {
	for _, sf := range faultSurfaces() {
		for _, fault := range []string{"reset", "stall"} {
			t.Run(sf.name+"/"+fault, func(t *testing.T) {
				gone := make(chan struct{}, 1)
				timeout := faultNoTimeout
				if fault == "stall" {
					timeout = faultStallTimeout
				}
				ts := newFaultProxy(t, timeout, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					half := len(sf.prefix) / 2
					_, _ = io.WriteString(w, sf.prefix[:half])
					w.(http.Flusher).Flush()
					_, _ = io.WriteString(w, sf.prefix[half:])
					w.(http.Flusher).Flush()
					if fault == "stall" {
						stallUntil(r, gone)
						return
					}
					if c, _ := hijack(t, w); c != nil {
						resetConn(c)
					}
				})
				resp, s := send(t, http.MethodPost, ts.URL+sf.path, sf.body)
				if resp.StatusCode != 200 || !strings.Contains(s, "checking") || !strings.Contains(s, `"upstream_stream_truncated"`) {
					t.Fatalf("%d %s", resp.StatusCode, s)
				}
				if strings.Contains(s, "secret") || strings.Contains(s, "Oslo") {
					t.Errorf("an unfinished call reached the client:\n%s", s)
				}
				if fault == "stall" {
					waitGone(t, gone)
				}
			})
		}
	}
}

// Before any byte of the answer, every route — the rewritten ones and the passthrough — maps the
// faults the same way: a refused or reset connection is 502 upstream_error, silence is 504
// upstream_timeout.
func TestFaultBeforeAnswerOnEveryRoute(t *testing.T) {
	routes := []struct{ method, path, body string }{
		{http.MethodPost, PathChat, chatRequest},
		{http.MethodPost, PathResponses, `{"model":"m","input":"go"}`},
		{http.MethodPost, PathMessages, `{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"go"}]}`},
		{http.MethodPost, "/v1beta/models/m:generateContent", `{"contents":[{"role":"user","parts":[{"text":"go"}]}]}`},
		{http.MethodGet, "/v1/models", ""},
		{http.MethodGet, "/v1beta/models", ""},
		{http.MethodPost, "/v1/embeddings", `{"model":"m","input":"x"}`},
	}
	faults := []struct {
		name    string
		timeout string
		h       func(t *testing.T, w http.ResponseWriter, r *http.Request)
		status  int
		code    string
	}{
		{"reset", faultNoTimeout, func(t *testing.T, w http.ResponseWriter, r *http.Request) {
			if c, _ := hijack(t, w); c != nil {
				resetConn(c)
			}
		}, http.StatusBadGateway, "upstream_error"},
		{"stall", "300ms", func(t *testing.T, w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(20 * time.Second):
			}
		}, http.StatusGatewayTimeout, "upstream_timeout"},
	}
	for _, f := range faults {
		ts := newFaultProxy(t, f.timeout, func(w http.ResponseWriter, r *http.Request) { f.h(t, w, r) })
		for _, rt := range routes {
			t.Run(f.name+rt.path, func(t *testing.T) {
				resp, b := send(t, rt.method, ts.URL+rt.path, rt.body)
				assertAPIError(t, resp, []byte(b), f.status, f.code)
			})
		}
	}
}
