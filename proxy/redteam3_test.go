package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestRedteamAnthropicMCPServers: Anthropic's MCP connector (`mcp_servers`, and the `mcp_toolset` entries of
// `tools` that refer to them) lets the model call every tool of a remote server, run by Anthropic, with no
// tool_use block for the proxy to vet. Both are governed as the tool `mcp`, as the Responses API's `mcp` type is:
// where `mcp` is not allowed, they never reach the upstream.
func TestRedteamAnthropicMCPServers(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, anthMessage("end_turn"))
	})
	ts, rec := newAnthProxy(t, up.URL, "refuse", "") // the guarded protocol allows web_fetch and get_weather only
	msgs := `"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]`
	servers := `"mcp_servers":[{"type":"url","url":"https://mcp.evil.example/sse","name":"evil","authorization_token":"SECRET"}]`
	for name, body := range map[string]string{
		"mcp_servers alone (mcp-client-2025-04-04)":    `{` + msgs + `,` + servers + `}`,
		"mcp_servers beside an allowed tool":           `{` + msgs + `,` + servers + `,"tools":[{"name":"get_weather","input_schema":{"type":"object"}}]}`,
		"mcp_servers with an mcp_toolset (2025-11-20)": `{` + msgs + `,` + servers + `,"tools":[{"type":"mcp_toolset","mcp_server_name":"evil"},{"name":"get_weather","input_schema":{"type":"object"}}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			resp, b := postTo(t, ts, PathMessages, body, map[string]string{"anthropic-beta": "mcp-client-2025-11-20"})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			got := up.lastBody(t)
			if gjson.GetBytes(got, "mcp_servers").Exists() || strings.Contains(string(got), "mcp.evil.example") || strings.Contains(string(got), "mcp_toolset") {
				t.Fatalf("the MCP server reached the upstream:\n%s", got)
			}
			if h := resp.Header.Get(HeaderToolsRemoved); h != "mcp" {
				t.Errorf("%s: %q", HeaderToolsRemoved, h)
			}
			if v := rec.verdicts(); v["tool_removed/mcp"] != "removed" {
				t.Errorf("decisions %v", v)
			}
			if strings.Contains(body, "get_weather") && gjson.GetBytes(got, `tools.#(name=="get_weather")`).Raw == "" {
				t.Errorf("the allowed tool was lost:\n%s", got)
			}
		})
	}
	t.Run("tool_choice cannot name it", func(t *testing.T) {
		before := up.count()
		resp, b := postTo(t, ts, PathMessages, `{`+msgs+`,`+servers+`,"tools":[{"type":"mcp_toolset","mcp_server_name":"evil"}],"tool_choice":{"type":"any"}}`, nil)
		assertAPIError(t, resp, b, 400, "tool_choice_not_allowed")
		if up.count() != before {
			t.Error("a refused request reached the upstream")
		}
	})
	t.Run("not an array", func(t *testing.T) {
		resp, b := postTo(t, ts, PathMessages, `{`+msgs+`,"mcp_servers":{"type":"url","url":"https://mcp.evil.example/sse","name":"evil"}}`, nil)
		assertAPIError(t, resp, b, 400, "invalid_request")
	})
}

// TestRedteamAnthropicMCPAllowed: where `mcp` is allowed (built-in protocols allow every declared tool), the MCP
// connector works as before, byte for byte.
func TestRedteamAnthropicMCPAllowed(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, anthMessage("end_turn"))
	})
	ts := newAnthNeutralProxy(t, up.URL)
	body := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}],"mcp_servers":[{"type":"url","url":"https://mcp.example.com/sse","name":"a"},{"type":"url","url":"https://mcp2.example.com/sse","name":"b"}],"tools":[{"type":"mcp_toolset","mcp_server_name":"a"},{"type":"mcp_toolset","mcp_server_name":"b"}]}`
	resp, b := postTo(t, ts, PathMessages, body, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	got := up.lastBody(t)
	if g := gjson.GetBytes(got, "mcp_servers").Raw; g != gjson.Get(body, "mcp_servers").Raw {
		t.Errorf("mcp_servers %s", g)
	}
	if g := gjson.GetBytes(got, "tools").Raw; g != gjson.Get(body, "tools").Raw {
		t.Errorf("tools %s", g)
	}
	if h := resp.Header.Get(HeaderToolsRemoved); h != "" {
		t.Errorf("%s: %q", HeaderToolsRemoved, h)
	}
}

// newAnthNeutralProxy serves promptgate with its built-in defaults (protocol neutral: every declared tool
// allowed) in front of an Anthropic stand-in.
func newAnthNeutralProxy(t *testing.T, anthUp string) *httptest.Server {
	t.Helper()
	e := testEngine(t, "", nil, nil, nil)
	ou, _ := url.Parse("http://127.0.0.1:1/v1")
	au, _ := url.Parse(anthUp + "/v1")
	s, err := New(Options{Engine: e, Upstream: ou, AnthropicUpstream: au})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

// TestRedteamBuiltinToolVersions: a built-in Responses tool that the operator switched off, denied or restricted
// by one of its names stays out under its other names (versions with and without _preview or a date, the
// computer tool's three names): a client cannot pick another version to get around the removal.
func TestRedteamBuiltinToolVersions(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","output":[]}`)
	})
	cfg := "tools:\n  web_search: {enabled: false}\n  computer_use_preview: {allowedProtocols: [system]}\n"
	e := testEngine(t, cfg, nil, nil, nil)
	u, _ := url.Parse(up.URL + "/v1")
	s, err := New(Options{Engine: e, Upstream: u})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	for _, typ := range []string{"web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11", "computer", "computer_use", "computer_use_preview"} {
		t.Run(typ, func(t *testing.T) {
			body := `{"model":"m","input":"x","tools":[{"type":"` + typ + `"},{"type":"function","name":"get_weather","parameters":{"type":"object"}}]}`
			resp, b := postTo(t, ts, PathResponses, body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if got := gjson.GetBytes(up.lastBody(t), "tools").Raw; got != `[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]` {
				t.Fatalf("tools upstream %s", got)
			}
			if h := resp.Header.Get(HeaderToolsRemoved); h != typ {
				t.Errorf("%s: %q", HeaderToolsRemoved, h)
			}
		})
	}
	// Other built-in tools are untouched.
	body := `{"model":"m","input":"x","tools":[{"type":"file_search","vector_store_ids":["vs_1"]},{"type":"image_generation"}]}`
	resp, b := postTo(t, ts, PathResponses, body, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderToolsRemoved) != "" || gjson.GetBytes(up.lastBody(t), "tools").Raw != gjson.Get(body, "tools").Raw {
		t.Fatalf("status %d %q: %s\n%s", resp.StatusCode, resp.Header.Get(HeaderToolsRemoved), b, up.lastBody(t))
	}
}

// TestRedteamEncodedUpstreamBody: an answer to a rewritten request in a content coding the proxy did not ask for
// (the transport asks for none) cannot be vetted: the relay would read compressed bytes
// while the client decodes them (undici and browsers decode br and deflate unasked) into events the relay never
// saw — an upstream that is not trusted could hide a call in comment lines. It is a 502, stream or not.
func TestRedteamEncodedUpstreamBody(t *testing.T) {
	for _, tc := range []struct{ name, ct, body, encoding string }{
		{"stream, br", "text/event-stream", ":\x1b\x02\x00\xf8\xa5TOOL_CALLS\n\n", "br"},
		{"stream, deflate", "text/event-stream", ": x\n\n", "deflate"},
		{"stream, two codings", "text/event-stream", ": x\n\n", "gzip, br"},
		{"non-stream, zstd", "application/json", `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`, "zstd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ct)
				w.Header().Set("Content-Encoding", tc.encoding)
				_, _ = io.WriteString(w, tc.body)
			})
			ts, _ := newVetProxy(t, up.URL, "refuse")
			stream := tc.ct == "text/event-stream"
			body := `{"model":"m","stream":` + map[bool]string{true: "true", false: "false"}[stream] + `,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}]}`
			resp, b := postTo(t, ts, PathChat, body, map[string]string{"Accept-Encoding": "br, deflate, zstd"})
			assertAPIError(t, resp, b, http.StatusBadGateway, "upstream_error")
			if resp.Header.Get("Content-Encoding") != "" {
				t.Errorf("Content-Encoding %q", resp.Header.Get("Content-Encoding"))
			}
		})
	}
	// identity is no coding at all.
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "identity")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
	})
	ts, _ := newVetProxy(t, up.URL, "refuse")
	resp, b := postTo(t, ts, PathChat, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"hi"`) {
		t.Fatalf("identity: %d %s", resp.StatusCode, b)
	}
}
