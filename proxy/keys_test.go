package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func bindKey(t testing.TB, secret string, base *url.URL) Key {
	t.Helper()
	k, err := BindKey(secret, base)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// keyedReply answers a chat completion or an Anthropic message, whichever the path asks for.
func keyedReply(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if strings.HasSuffix(r.URL.Path, "/messages") {
		_, _ = io.WriteString(w, `{"id":"msg_01","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`)
		return
	}
	_, _ = io.WriteString(w, completionJSON)
}

// TestKeysGoToTheirOwnOriginOnly builds Servers as the base-URL listener does (each upstream its
// configured one) and as the HTTPS-proxy door does (both upstreams at the origin the client named),
// with both operator keys set, and reads the credentials each fake upstream receives.
func TestKeysGoToTheirOwnOriginOnly(t *testing.T) {
	t.Parallel()
	openaiUp, anthUp, otherUp := newUpstream(t, keyedReply), newUpstream(t, keyedReply), newUpstream(t, keyedReply)
	base := func(u *upstream) *url.URL {
		p, err := url.Parse(u.URL + "/v1")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	openaiURL, anthURL, otherURL := base(openaiUp), base(anthUp), base(otherUp) // otherUp: the same host, another port
	openaiKey, anthKey := bindKey(t, "sk-openai-operator", openaiURL), bindKey(t, "sk-ant-operator", anthURL)
	e := testEngine(t, "", nil, nil, nil)
	const (
		chat     = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		messages = `{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`
	)
	for _, tc := range []struct {
		name                string
		upstream, anthropic *url.URL // the Server's upstreams
		method, path, body  string
		client              map[string]string // credentials the client sends
		lands               *upstream
		wantAuth, wantKey   string
	}{
		{"base listener: chat to --upstream", openaiURL, anthURL, "POST", PathChat, chat, nil, openaiUp, "Bearer sk-openai-operator", ""},
		{"base listener: passthrough to --upstream", openaiURL, anthURL, "GET", "/v1/models", "", nil, openaiUp, "Bearer sk-openai-operator", ""},
		{"base listener: messages to --anthropic-upstream", openaiURL, anthURL, "POST", PathMessages, messages, nil, anthUp, "", "sk-ant-operator"},
		{"base listener: count_tokens to --anthropic-upstream", openaiURL, anthURL, "POST", PathMessages + "/count_tokens", messages, nil, anthUp, "", "sk-ant-operator"},
		{"door: chat to the OpenAI origin", openaiURL, openaiURL, "POST", PathChat, chat, nil, openaiUp, "Bearer sk-openai-operator", ""},
		{"door: messages to the Anthropic origin", anthURL, anthURL, "POST", PathMessages, messages, nil, anthUp, "", "sk-ant-operator"},
		{"door: chat to the Anthropic origin", anthURL, anthURL, "POST", PathChat, chat, nil, anthUp, "", ""},
		{"door: models at the Anthropic origin", anthURL, anthURL, "GET", "/v1/models", "", nil, anthUp, "", ""},
		{"door: messages to the OpenAI origin", openaiURL, openaiURL, "POST", PathMessages, messages, nil, openaiUp, "", ""},
		{"door: chat to another port", otherURL, otherURL, "POST", PathChat, chat, nil, otherUp, "", ""},
		{"door: messages to another port", otherURL, otherURL, "POST", PathMessages, messages, nil, otherUp, "", ""},
		{
			"door: the client's own credentials pass unchanged elsewhere", otherURL, otherURL, "POST", PathMessages, messages,
			map[string]string{"Authorization": "Bearer sk-client", "X-Api-Key": "sk-client-ant"}, otherUp, "Bearer sk-client", "sk-client-ant",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: tc.upstream, Key: openaiKey}, "anthropic": {URL: tc.anthropic, Key: anthKey}}})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(s)
			defer ts.Close()
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			for k, v := range tc.client {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			tc.lands.mu.Lock()
			h := tc.lands.headers[len(tc.lands.headers)-1]
			path := tc.lands.paths[len(tc.lands.paths)-1]
			tc.lands.mu.Unlock()
			if path != tc.path {
				t.Fatalf("the upstream got %s, want %s (status %d)", path, tc.path, resp.StatusCode)
			}
			if got := h.Get("Authorization"); got != tc.wantAuth {
				t.Errorf("Authorization %q, want %q", got, tc.wantAuth)
			}
			if got := h.Get("X-Api-Key"); got != tc.wantKey {
				t.Errorf("x-api-key %q, want %q", got, tc.wantKey)
			}
		})
	}
}

func TestKeyWithoutOriginRefused(t *testing.T) {
	t.Parallel()
	e := testEngine(t, "", nil, nil, nil)
	u, _ := url.Parse("https://api.openai.com/v1")
	for _, o := range []Options{
		{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u, Key: Key{Secret: "sk-x"}}}},
		{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {Key: Key{Secret: "sk-x"}}}},
	} {
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), "BindKey") {
			t.Errorf("a key without an origin: %v", err)
		}
	}
	if k, err := BindKey("", u); err != nil || k != (Key{}) {
		t.Errorf("no secret: %+v %v", k, err)
	}
	bad, _ := url.Parse("ftp://example.com/")
	if _, err := BindKey("sk-x", bad); err == nil {
		t.Error("a key bound to an ftp URL")
	}
}
