package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"github.com/tidwall/gjson"
)

// upstream is an httptest OpenAI stand-in that records what it receives.
type upstream struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   [][]byte
	headers  []http.Header
	paths    []string
	handler  http.HandlerFunc
	received chan struct{}
}

func newUpstream(t *testing.T, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{handler: h, received: make(chan struct{}, 100)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies = append(u.bodies, b)
		u.headers = append(u.headers, r.Header.Clone())
		u.paths = append(u.paths, r.URL.RequestURI())
		u.mu.Unlock()
		u.received <- struct{}{}
		r.Body = io.NopCloser(bytes.NewReader(b))
		u.handler(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) lastBody(t *testing.T) []byte {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.bodies) == 0 {
		t.Fatal("upstream received nothing")
	}
	return u.bodies[len(u.bodies)-1]
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.bodies)
}

// newProxy serves promptgate in front of up, with an optional config and env.
func newProxy(t *testing.T, up string, cfgYAML string, env map[string]string) *httptest.Server {
	t.Helper()
	e := testEngine(t, cfgYAML, env, nil, nil)
	u, err := url.Parse(up + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

const completionJSON = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hi there","refusal":null},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`

func okCompletion(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", "req_upstream_1")
	_, _ = io.WriteString(w, completionJSON)
}

func newClient(ts *httptest.Server, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(ts.URL + "/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0)}, opts...)...)
}

func TestE2ENonStreamOfficialClient(t *testing.T) {
	up := newUpstream(t, okCompletion)
	ts := newProxy(t, up.URL, "", nil)
	client := newClient(ts)
	var resp *http.Response
	got, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("You are ACME's bot."), openai.UserMessage("hello")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Description: openai.String("Weather for a city."),
			Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		})},
	}, option.WithResponseInto(&resp), option.WithJSONSet("x_vendor_flag", map[string]any{"a": 1}), option.WithJSONSet("promptgate", map[string]any{"context": map[string]any{"city": "Oslo"}}))
	if err != nil {
		t.Fatal(err)
	}
	if got.Choices[0].Message.Content != "hi there" {
		t.Fatalf("content %q", got.Choices[0].Message.Content)
	}
	if p := resp.Header.Get("X-Promptgate-Protocol"); p != "neutral" {
		t.Errorf("X-Promptgate-Protocol = %q", p)
	}
	if tm := resp.Header.Get("X-Promptgate-Template"); tm != "base_tool_call_v2@1" {
		t.Errorf("X-Promptgate-Template = %q", tm)
	}
	if id := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(id, "pg-") {
		t.Errorf("X-Request-Id = %q", id)
	}
	if id := resp.Header.Get("X-Upstream-Request-Id"); id != "req_upstream_1" {
		t.Errorf("X-Upstream-Request-Id = %q", id)
	}
	body := up.lastBody(t)
	msgs := gjson.GetBytes(body, "messages").Array()
	if len(msgs) != 2 || msgs[0].Get("role").String() != "system" || msgs[1].Get("role").String() != "user" {
		t.Fatalf("upstream messages: %s", gjson.GetBytes(body, "messages").Raw)
	}
	sys := msgs[0].Get("content").String()
	for _, want := range []string{"=== SYSTEM CORE ===", "=== APPLICATION INSTRUCTIONS ===\nYou are ACME's bot.", "- get_weather: Weather for a city.", `"request":{"city":"Oslo"}`} {
		if !strings.Contains(sys, want) {
			t.Errorf("system message lacks %q", want)
		}
	}
	if gjson.GetBytes(body, "x_vendor_flag.a").Int() != 1 || gjson.GetBytes(body, "promptgate").Exists() {
		t.Errorf("unknown field lost or promptgate leaked: %s", body)
	}
	if up.headers[0].Get("Authorization") != "Bearer sk-test" {
		t.Errorf("Authorization not forwarded: %q", up.headers[0].Get("Authorization"))
	}
}

// sseUpstream streams the given events, splitting each one across two writes with a flush between.
func sseUpstream(events []string, pause time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for _, e := range events {
			frame := "data: " + e + "\n\n"
			half := len(frame) / 2
			_, _ = io.WriteString(w, frame[:half])
			f.Flush()
			time.Sleep(pause)
			_, _ = io.WriteString(w, frame[half:])
			f.Flush()
		}
	}
}

func chunk(delta string, finish string) string {
	fr := "null"
	if finish != "" {
		fr = `"` + finish + `"`
	}
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}`, delta, fr)
}

func TestE2EStreamOfficialClient(t *testing.T) {
	events := []string{
		chunk(`{"role":"assistant","content":""}`, ""),
		chunk(`{"content":"Hel"}`, ""),
		chunk(`{"content":"lo"}`, ""),
		chunk(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"ci"}}]}`, ""),
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"ty\":\"Oslo\"}"}}]}`, ""),
		chunk(`{}`, "tool_calls"),
		"[DONE]",
	}
	up := newUpstream(t, sseUpstream(events, time.Millisecond))
	ts := newProxy(t, up.URL, "", nil)
	client := newClient(ts)
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather?")},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}},
		})},
	})
	acc := openai.ChatCompletionAccumulator{}
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(acc.Choices) != 1 {
		t.Fatalf("choices: %d", len(acc.Choices))
	}
	m := acc.Choices[0].Message
	if m.Content != "Hello" {
		t.Errorf("content %q", m.Content)
	}
	if len(m.ToolCalls) != 1 || m.ToolCalls[0].Function.Name != "get_weather" || m.ToolCalls[0].Function.Arguments != `{"city":"Oslo"}` || m.ToolCalls[0].ID != "call_1" {
		t.Errorf("tool calls: %+v", m.ToolCalls)
	}
	if acc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("finish_reason %q", acc.Choices[0].FinishReason)
	}
	if !gjson.GetBytes(up.lastBody(t), "stream").Bool() {
		t.Error("stream flag lost")
	}
}

// TestStreamFirstEventBeforeUpstreamFinishes proves the relay does not buffer: the client reads the
// first text event while the upstream is still blocked before sending the rest.
func TestStreamFirstEventBeforeUpstreamFinishes(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: "+chunk(`{"role":"assistant","content":"first"}`, "")+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		_, _ = io.WriteString(w, "data: "+chunk(`{"content":" second"}`, "stop")+"\n\ndata: [DONE]\n\n")
	})
	ts := newProxy(t, up.URL, "", nil)
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	line, err := rd.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(line, `"first"`) {
		t.Fatalf("first line %q", line)
	}
	close(release) // only now may the upstream finish
	rest, _ := io.ReadAll(rd)
	if !strings.Contains(string(rest), `" second"`) || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("rest of stream: %q", rest)
	}
}

func TestClientGoneCancelsUpstream(t *testing.T) {
	cancelled := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: "+chunk(`{"content":"x"}`, "")+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	})
	ts := newProxy(t, up.URL, "", nil)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = bufio.NewReader(resp.Body).ReadString('\n')
	cancel()
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("upstream call was not cancelled when the client went away")
	}
}

func TestPassthroughUnchanged(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"object":"list","path":%q}`, r.URL.RequestURI())
	})
	ts := newProxy(t, up.URL, "", nil)
	body := `{"model":"text-embedding-3-small","input":"hi",  "promptgate":{"x":1}}`
	resp, err := http.Post(ts.URL+"/v1/embeddings?x=1", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(got), `"/v1/embeddings?x=1"`) {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
	if string(up.lastBody(t)) != body {
		t.Errorf("passthrough body changed: %s", up.lastBody(t))
	}
	resp, err = http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || up.paths[len(up.paths)-1] != "/v1/models" {
		t.Errorf("GET /v1/models: %d %v", resp.StatusCode, up.paths)
	}
}

func TestHealthAndAdminNotServed(t *testing.T) {
	up := newUpstream(t, okCompletion)
	ts := newProxy(t, up.URL, "", nil)
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/admin/prompts/preview": 404, "/admin/templates": 404, "/nope": 404} {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	if up.count() != 0 {
		t.Error("admin or unknown paths reached the upstream")
	}
}

// errCase posts body and expects status and code.
type errCase struct {
	name    string
	body    string
	headers map[string]string
	status  int
	code    string
}

func postJSON(t *testing.T, ts *httptest.Server, body string, headers map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b
}

func assertAPIError(t *testing.T, resp *http.Response, b []byte, status int, code string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Errorf("status %d, want %d: %s", resp.StatusCode, status, b)
	}
	var e struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    string  `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("not an OpenAI error body: %s", b)
	}
	if e.Error.Code != code || e.Error.Message == "" || e.Error.Type == "" {
		t.Errorf("error %+v, want code %q", e.Error, code)
	}
	if !gjson.GetBytes(b, "error.param").Exists() {
		t.Error("error.param missing")
	}
	// The contract's error table shows "param": null; its codes answer exactly that.
	if contractParam(code, "x") == "" && gjson.GetBytes(b, "error.param").Type != gjson.Null {
		t.Errorf("error.param %s, want null for code %s", gjson.GetBytes(b, "error.param").Raw, code)
	}
	if resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("content type %q", resp.Header.Get("Content-Type"))
	}
}

func TestBadInputs(t *testing.T) {
	up := newUpstream(t, okCompletion)
	ts := newProxy(t, up.URL, "limits: {maxBodyBytes: 2048, maxJSONDepth: 8}\n", nil)
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	deep := strings.Repeat(`{"a":`, 9) + "1" + strings.Repeat("}", 9)
	cases := []errCase{
		{"not json", `{"model":`, nil, 400, "invalid_json"},
		{"array", `[1,2]`, nil, 400, "invalid_json"},
		{"empty", ``, nil, 400, "invalid_json"},
		{"trailing garbage", `{"model":"m",` + msgs + `} x`, nil, 400, "invalid_json"},
		{"duplicate keys", `{"model":"m","model":"n",` + msgs + `}`, nil, 400, "invalid_json"},
		{"escaped duplicate keys", `{"model":"m","mod\u0065l":"n",` + msgs + `}`, nil, 400, "invalid_json"},
		{"invalid utf8", "{\"model\":\"m\xff\"," + msgs + "}", nil, 400, "invalid_json"},
		{"too deep", `{"model":"m","x":` + deep + `,` + msgs + `}`, nil, 400, "invalid_json"},
		{"too large", `{"model":"m","pad":"` + strings.Repeat("x", 3000) + `",` + msgs + `}`, nil, 413, "body_too_large"},
		{"unknown protocol header", `{"model":"m",` + msgs + `}`, map[string]string{"X-Promptgate-Protocol": "nope"}, 400, "unknown_protocol"},
		{"unknown protocol body", `{"model":"m",` + msgs + `,"promptgate":{"protocol":"nope"}}`, nil, 400, "unknown_protocol"},
		{"protocol not allowed", `{"model":"m",` + msgs + `}`, map[string]string{"X-Promptgate-Protocol": "system"}, 403, "protocol_not_allowed"},
		{"tool_choice names undeclared", `{"model":"m",` + msgs + `,"tools":[{"type":"function","function":{"name":"a"}}],"tool_choice":{"type":"function","function":{"name":"b"}}}`, nil, 400, "tool_choice_not_allowed"},
		{"promptgate not object", `{"model":"m",` + msgs + `,"promptgate":"tech"}`, nil, 400, "invalid_request"},
		{"promptgate unknown key", `{"model":"m",` + msgs + `,"promptgate":{"protocl":"tech"}}`, nil, 400, "invalid_request"},
		{"messages not array", `{"model":"m","messages":{}}`, nil, 400, "invalid_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := up.count()
			resp, b := postJSON(t, ts, c.body, c.headers)
			assertAPIError(t, resp, b, c.status, c.code)
			if up.count() != before {
				t.Error("a refused request reached the upstream")
			}
			if resp.Header.Get("X-Request-Id") == "" {
				t.Error("no X-Request-Id on an error")
			}
		})
	}
}

func TestToolChoiceRemovedTool(t *testing.T) {
	up := newUpstream(t, okCompletion)
	ts := newProxy(t, up.URL, "tools:\n  danger: {enabled: false}\n", nil)
	resp, b := postJSON(t, ts, `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"danger"}}],"tool_choice":{"type":"function","function":{"name":"danger"}}}`, nil)
	assertAPIError(t, resp, b, 400, "tool_choice_not_allowed")
	resp, b = postJSON(t, ts, `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"danger"}}],"tool_choice":"required"}`, nil)
	assertAPIError(t, resp, b, 400, "tool_choice_not_allowed")
	resp, b = postJSON(t, ts, `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"danger"}},{"type":"function","function":{"name":"ok"}}]}`, nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Promptgate-Tools-Removed") != "danger" {
		t.Fatalf("%d %q %s", resp.StatusCode, resp.Header.Get("X-Promptgate-Tools-Removed"), b)
	}
	if names := gjson.GetBytes(up.lastBody(t), "tools.#.function.name").Raw; names != `["ok"]` {
		t.Errorf("upstream tools %s", names)
	}
}

func TestUpstreamFailures(t *testing.T) {
	msgs := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	t.Run("unreachable", func(t *testing.T) {
		dead := httptest.NewServer(http.NotFoundHandler())
		addr := dead.URL
		dead.Close()
		ts := newProxy(t, addr, "", nil)
		resp, b := postJSON(t, ts, msgs, nil)
		assertAPIError(t, resp, b, 502, "upstream_error")
	})
	t.Run("timeout", func(t *testing.T) {
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		})
		ts := newProxy(t, up.URL, "limits: {upstreamTimeout: 200ms}\n", nil)
		resp, b := postJSON(t, ts, msgs, nil)
		assertAPIError(t, resp, b, 504, "upstream_timeout")
	})
	t.Run("json error passed through", func(t *testing.T) {
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(429)
			_, _ = io.WriteString(w, `{"error":{"message":"slow down","type":"rate_limit","param":null,"code":"rate_limit_exceeded"}}`)
		})
		ts := newProxy(t, up.URL, "", nil)
		resp, b := postJSON(t, ts, msgs, nil)
		assertAPIError(t, resp, b, 429, "rate_limit_exceeded")
	})
	t.Run("html error is malformed", func(t *testing.T) {
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			_, _ = io.WriteString(w, `<html>bad gateway</html>`)
		})
		ts := newProxy(t, up.URL, "", nil)
		resp, b := postJSON(t, ts, msgs, nil)
		assertAPIError(t, resp, b, 502, "upstream_error")
	})
	t.Run("malformed success body", func(t *testing.T) {
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[`)
		})
		ts := newProxy(t, up.URL, "", nil)
		resp, b := postJSON(t, ts, msgs, nil)
		assertAPIError(t, resp, b, 502, "upstream_error")
	})
	t.Run("stream cut", func(t *testing.T) {
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: "+chunk(`{"content":"partial"}`, "")+"\n\n")
			w.(http.Flusher).Flush()
			hj, ok := w.(http.Hijacker)
			if !ok {
				return
			}
			conn, _, _ := hj.Hijack()
			_ = conn.Close()
		})
		ts := newProxy(t, up.URL, "", nil)
		resp, b := postJSON(t, ts, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil)
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"partial"`) || !strings.Contains(string(b), `"upstream_stream_truncated"`) {
			t.Errorf("%d %s", resp.StatusCode, b)
		}
	})
}

func TestUpstreamKeyReplacesAuthorization(t *testing.T) {
	up := newUpstream(t, okCompletion)
	e := testEngine(t, "", nil, nil, nil)
	u, _ := url.Parse(up.URL + "/v1")
	s, err := New(Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u, Key: bindKey(t, "sk-operator", u)}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	resp, _ := postJSON(t, ts, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, map[string]string{"Authorization": "Bearer sk-client", "X-Promptgate-User": "u1"})
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	h := up.headers[len(up.headers)-1]
	if h.Get("Authorization") != "Bearer sk-operator" {
		t.Errorf("Authorization %q", h.Get("Authorization"))
	}
	if h.Get("X-Promptgate-User") != "" {
		t.Error("promptgate headers reached upstream")
	}
}

// A vetted answer of known length is written whole, with no flush of its own (one write to the
// client's connection when the handler returns); a stream is flushed as it is relayed, so its text
// is not delayed.
func TestFlushOnlyStreams(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(string(mustRead(t, r.Body)), `"stream":true`) {
			sseUpstream([]string{chunk("hi", ""), chunk("", "stop"), "[DONE]"}, 0)(w, r)
			return
		}
		okCompletion(w, r)
	})
	u, err := url.Parse(up.URL + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Engine: testEngine(t, "", nil, nil, nil), Upstreams: map[string]Upstream{"openai": {URL: u}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		body    string
		flushed bool
	}{
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, false},
		{`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, true},
	} {
		req := httptest.NewRequest("POST", "http://127.0.0.1"+PathChat, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != http.StatusOK || w.Flushed != c.flushed {
			t.Errorf("%s: status %d, flushed %v, want %v: %s", c.body, w.Code, w.Flushed, c.flushed, w.Body)
		}
	}
}

func mustRead(t *testing.T, r io.Reader) []byte {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Error(err)
	}
	return b
}
