package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/audit"
)

// governProxy serves promptgate whose default protocol is the given definition (nil: the built-in
// neutral, every declared tool allowed), with extra config lines, in front of up for both the
// OpenAI and the Anthropic surfaces.
func governProxy(t *testing.T, up string, protocol json.RawMessage, cfg string) (*httptest.Server, *memAudit) {
	t.Helper()
	var protos []json.RawMessage
	if protocol != nil {
		protos = append(protos, protocol)
		cfg = "defaultProtocol: " + gjson.GetBytes(protocol, "id").String() + "\n" + cfg
	}
	e := testEngine(t, cfg, nil, nil, protos)
	u, _ := url.Parse(up + "/v1")
	rec := &memAudit{}
	return serveProxy(t, Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: u}}, Audit: rec}), rec
}

// toolsProtocol is a protocol named id with the given tools section.
func toolsProtocol(id, tools string) json.RawMessage {
	return json.RawMessage(`{"id":"` + id + `","promptTemplate":{"base":"base_tool_call_v2"},"tools":` + tools + `}`)
}

// jsonUpstream answers every request with body.
func jsonUpstream(t *testing.T, body string) *upstream {
	return newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	})
}

// TestChatWebSearchOptions: Chat Completions' web_search_options lets the upstream search the web
// with no tools entry. It is the built-in tool web_search (the Responses API's name): removed,
// reported and recorded where web_search is not allowed; kept byte for byte where it is.
func TestChatWebSearchOptions(t *testing.T) {
	up := jsonUpstream(t, completionJSON)
	const opts = `{"search_context_size":"low","user_location":{"type":"approximate","approximate":{"city":"Oslo"}}}`
	msgs := `"model":"gpt-4o-search-preview","messages":[{"role":"user","content":"news?"}]`
	weather := `{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}`

	removedCases := []struct {
		name, protocol, cfg, body string
	}{
		{"allowlist without it, options alone", "guarded", "", `{` + msgs + `,"web_search_options":` + opts + `}`},
		{"allowlist without it, beside an allowed tool", "guarded", "", `{` + msgs + `,"web_search_options":` + opts + `,"tools":[` + weather + `]}`},
		{"empty options object", "guarded", "", `{` + msgs + `,"web_search_options":{}}`},
		{"key spelt with an escape", "guarded", "", `{` + msgs + `,"web\u005fsearch_options":` + opts + `}`},
		{"options first, promptgate next", "guarded", "", `{"web_search_options":{},"promptgate":{"user":"u"},` + msgs + `}`},
		{"a function named web_search too", "guarded", "", `{` + msgs + `,"web_search_options":{},"tools":[{"type":"function","function":{"name":"web_search"}},` + weather + `]}`},
		{"deny", "denied", "", `{` + msgs + `,"web_search_options":` + opts + `}`},
		{"kill switch", "", "tools:\n  web_search: {enabled: false}\n", `{` + msgs + `,"web_search_options":` + opts + `}`},
		{"kill switch of another version", "", "tools:\n  web_search_preview: {enabled: false}\n", `{` + msgs + `,"web_search_options":` + opts + `}`},
		{"access policy", "", "tools:\n  web_search: {allowedProtocols: [system]}\n", `{` + msgs + `,"web_search_options":` + opts + `}`},
	}
	protocols := map[string]json.RawMessage{
		"guarded": vetProtocol("refuse"),
		"denied":  toolsProtocol("denied", `{"allow":["*"],"deny":["web_search"]}`),
	}
	for _, c := range removedCases {
		t.Run(c.name, func(t *testing.T) {
			ts, rec := governProxy(t, up.URL, protocols[c.protocol], c.cfg)
			resp, b := postJSON(t, ts, c.body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			got := up.lastBody(t)
			if gjson.GetBytes(got, "web_search_options").Exists() || strings.Contains(string(got), "search_context_size") || strings.Contains(string(got), `search_options`) {
				t.Fatalf("web_search_options reached the upstream:\n%s", got)
			}
			if !gjson.ValidBytes(got) {
				t.Fatalf("upstream body is not JSON: %s", got)
			}
			if h := resp.Header.Get(HeaderToolsRemoved); h != "web_search" {
				t.Errorf("%s: %q", HeaderToolsRemoved, h)
			}
			if v := rec.verdicts(); v[audit.KindToolRemoved+"/web_search"] != audit.VerdictRemoved {
				t.Errorf("decisions %v", v)
			}
			if strings.Contains(c.body, "get_weather") && gjson.GetBytes(got, `tools.#(function.name=="get_weather")`).Raw == "" {
				t.Errorf("the allowed tool was lost:\n%s", got)
			}
			if !strings.Contains(c.body, "tools") && gjson.GetBytes(got, "tools").Exists() {
				t.Errorf("tools appeared:\n%s", got)
			}
		})
	}

	keptCases := []struct {
		name, protocol, cfg, body string
	}{
		{"built-in protocol", "", "", `{` + msgs + `,"web_search_options":` + opts + `}`},
		{"built-in protocol, kill switch of another tool", "", "tools:\n  delete_all: {enabled: false}\n", `{` + msgs + `,"web_search_options":` + opts + `,"tools":[` + weather + `]}`},
		{"allowlisted", "searcher", "", `{` + msgs + `,"web_search_options":` + opts + `,"tools":[` + weather + `]}`},
		{"allowlisted, nothing else declared", "searcher", "", `{` + msgs + `,"web_search_options" : ` + opts + ` }`},
		{"null is no search", "guarded", "", `{` + msgs + `,"web_search_options":null}`},
	}
	protocols["searcher"] = toolsProtocol("searcher", `{"allow":["web_search","get_weather"]}`)
	for _, c := range keptCases {
		t.Run(c.name, func(t *testing.T) {
			ts, _ := governProxy(t, up.URL, protocols[c.protocol], c.cfg)
			resp, b := postJSON(t, ts, c.body, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			got := up.lastBody(t)
			if g, w := gjson.GetBytes(got, "web_search_options").Raw, gjson.Get(c.body, "web_search_options").Raw; g != w {
				t.Errorf("web_search_options %s, want %s", g, w)
			}
			if h := resp.Header.Get(HeaderToolsRemoved); h != "" {
				t.Errorf("%s: %q", HeaderToolsRemoved, h)
			}
			if g, w := gjson.GetBytes(got, "tools").Raw, gjson.Get(c.body, "tools").Raw; g != w {
				t.Errorf("tools %s, want %s", g, w)
			}
		})
	}

	t.Run("not an object", func(t *testing.T) {
		ts, _ := governProxy(t, up.URL, nil, "")
		for _, v := range []string{`"auto"`, `true`, `[]`, `1`, `[{"search_context_size":"low"}]`} {
			before := up.count()
			resp, b := postJSON(t, ts, `{`+msgs+`,"web_search_options":`+v+`}`, nil)
			assertAPIError(t, resp, b, http.StatusBadRequest, "invalid_request")
			if p := gjson.GetBytes(b, "error.param").String(); p != "web_search_options" {
				t.Errorf("%s: param %q", v, p)
			}
			if up.count() != before {
				t.Errorf("%s: a refused request reached the upstream", v)
			}
		}
	})
}

// TestAnthropicToolNames: an Anthropic-defined tool is governed by its name, and Anthropic fixes
// the name of each tool type (web_search_20250305 is web_search, text_editor_20250728 is
// str_replace_based_edit_tool, ...). A name other than the type's is refused, so that a server tool
// can never pass as an allowed client tool; a nameless one is governed by the type's name; the
// names real clients send keep working byte for byte.
func TestAnthropicToolNames(t *testing.T) {
	up := jsonUpstream(t, anthMessage("end_turn"))
	msgs := `"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"x"}]`
	weather := `{"name":"get_weather","input_schema":{"type":"object"}}`
	guarded, _ := governProxy(t, up.URL, vetProtocol("refuse"), "")

	t.Run("renamed server tool refused", func(t *testing.T) {
		for _, c := range []struct{ tools, param string }{
			{`[{"type":"web_search_20250305","name":"get_weather"}]`, "tools[0].name"},
			{`[` + weather + `,{"type":"web_fetch_20250910","name":"get_weather","max_uses":3}]`, "tools[1].name"},
			{`[{"type":"code_execution_20250825","name":"web_fetch"}]`, "tools[0].name"},
			{`[{"type":"bash_20250124","name":"get_weather"}]`, "tools[0].name"},
			{`[{"type":"text_editor_20250728","name":"str_replace_editor"}]`, "tools[0].name"},
			{`[{"type":"text_editor_20250124","name":"str_replace_based_edit_tool"}]`, "tools[0].name"},
			{`[{"type":"web_search_20991231","name":"web_fetch"}]`, "tools[0].name"},   // a version not known yet
			{`[{"type":"frobnicate_20991231","name":"get_weather"}]`, "tools[0].name"}, // a tool not known yet
			{`[{"type":"tool_search_tool_regex","name":"web_fetch"}]`, "tools[0].name"},
			{`[{"type":"web_search_20250305","name":5}]`, "tools[0].name"},
			{`[{"type":"web_search_20250305","n\u0061me":"get_weather"}]`, "tools[0].name"},
		} {
			before := up.count()
			resp, b := postTo(t, guarded, PathMessages, `{`+msgs+`,"tools":`+c.tools+`}`, nil)
			assertAPIError(t, resp, b, http.StatusBadRequest, "invalid_request")
			if p := gjson.GetBytes(b, "error.param").String(); p != c.param {
				t.Errorf("%s: param %q, want %q", c.tools, p, c.param)
			}
			if up.count() != before {
				t.Errorf("%s: a refused request reached the upstream", c.tools)
			}
		}
	})

	t.Run("nameless server tool governed by its type's name", func(t *testing.T) {
		resp, b := postTo(t, guarded, PathMessages, `{`+msgs+`,"tools":[{"type":"web_search_20250305"},`+weather+`]}`, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if h := resp.Header.Get(HeaderToolsRemoved); h != "web_search" {
			t.Errorf("%s: %q", HeaderToolsRemoved, h)
		}
		if got := gjson.GetBytes(up.lastBody(t), "tools").Raw; got != `[`+weather+`]` {
			t.Errorf("tools upstream %s", got)
		}
	})

	t.Run("allowed server tool kept byte for byte", func(t *testing.T) {
		tools := `[{"type":"web_fetch_20250910","name":"web_fetch","max_uses":2,"allowed_domains":["docs.example.com"]},` + weather + `]`
		resp, b := postTo(t, guarded, PathMessages, `{`+msgs+`,"tools":`+tools+`}`, nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderToolsRemoved) != "" {
			t.Fatalf("status %d %q: %s", resp.StatusCode, resp.Header.Get(HeaderToolsRemoved), b)
		}
		if got := gjson.GetBytes(up.lastBody(t), "tools").Raw; got != tools {
			t.Errorf("tools upstream %s", got)
		}
	})

	t.Run("the names real clients send", func(t *testing.T) {
		neutral, _ := governProxy(t, up.URL, nil, "")
		tools := `[{"type":"web_search_20250305","name":"web_search","max_uses":1},{"type":"web_fetch_20250910","name":"web_fetch"},` +
			`{"type":"code_execution_20250825","name":"code_execution"},{"type":"bash_20250124","name":"bash"},` +
			`{"type":"text_editor_20250124","name":"str_replace_editor"},{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"},` +
			`{"type":"computer_20250124","name":"computer","display_width_px":1024,"display_height_px":768},{"type":"memory_20250818","name":"memory"},` +
			`{"type":"tool_search_tool_bm25_20251119","name":"tool_search_tool_bm25"},{"type":"advisor_20991231","name":"advisor"},` +
			`{"type":"browser_toolset_20260801"},` +
			`{"type":"custom","name":"web_search_20250305","input_schema":{"type":"object"}},` + weather + `]`
		resp, b := postTo(t, neutral, PathMessages, `{`+msgs+`,"tools":`+tools+`}`, nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get(HeaderToolsRemoved) != "" {
			t.Fatalf("status %d %q: %s", resp.StatusCode, resp.Header.Get(HeaderToolsRemoved), b)
		}
		if got := gjson.GetBytes(up.lastBody(t), "tools").Raw; got != tools {
			t.Errorf("tools upstream %s", got)
		}
	})

	t.Run("a kill switch of the dated type removes it", func(t *testing.T) {
		ts, rec := governProxy(t, up.URL, nil, "tools:\n  web_search_20250305: {enabled: false}\n")
		resp, b := postTo(t, ts, PathMessages, `{`+msgs+`,"tools":[{"type":"web_search_20250305","name":"web_search"},`+weather+`]}`, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if h := resp.Header.Get(HeaderToolsRemoved); h != "web_search" {
			t.Errorf("%s: %q", HeaderToolsRemoved, h)
		}
		if got := gjson.GetBytes(up.lastBody(t), "tools").Raw; got != `[`+weather+`]` {
			t.Errorf("tools upstream %s", got)
		}
		if v := rec.verdicts(); v[audit.KindToolRemoved+"/web_search"] != audit.VerdictRemoved {
			t.Errorf("decisions %v", v)
		}
	})
}

// TestResponsesStoredPrompt: a Responses request's prompt names a stored prompt, whose tools and
// instructions live upstream, out of promptgate's sight. Where the operator restricts tools at all
// (an explicit allowlist, a deny list, a kill switch or an access policy), such a request is
// refused with a decision event; where every declared tool is allowed, it is forwarded byte for
// byte.
func TestResponsesStoredPrompt(t *testing.T) {
	up := jsonUpstream(t, `{"id":"resp_1","object":"response","status":"completed","output":[]}`)
	const prompt = `{"id":"pmpt_abc","version":"2","variables":{"city":"Oslo"}}`
	body := `{"model":"gpt-4.1","prompt":` + prompt + `,"input":"go"}`

	for _, c := range []struct {
		name, cfg string
		protocol  json.RawMessage
	}{
		{"explicit allowlist", "", vetProtocol("refuse")},
		{"allowlist of every tool but a deny list", "", toolsProtocol("denied", `{"allow":["*"],"deny":["shell"]}`)},
		{"built-in protocol with a kill switch", "tools:\n  web_search: {enabled: false}\n", nil},
		{"built-in protocol with an access policy", "tools:\n  observe_user: {allowedProtocols: [private]}\n", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts, rec := governProxy(t, up.URL, c.protocol, c.cfg)
			before := up.count()
			resp, b := postTo(t, ts, PathResponses, body, nil)
			assertAPIError(t, resp, b, http.StatusBadRequest, "invalid_request")
			if p := gjson.GetBytes(b, "error.param").String(); p != "prompt" {
				t.Errorf("param %q", p)
			}
			if msg := gjson.GetBytes(b, "error.message").String(); !strings.Contains(msg, "pmpt_abc") || !strings.Contains(msg, "stored prompt") {
				t.Errorf("message %q", msg)
			}
			if up.count() != before {
				t.Error("a refused request reached the upstream")
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if len(rec.events) != 1 || rec.events[0].Kind != audit.KindStoredPrompt || rec.events[0].Verdict != audit.VerdictBlocked ||
				rec.events[0].Tool != "prompt" || rec.events[0].RequestID != resp.Header.Get(HeaderRequestID) || !strings.Contains(rec.events[0].Reason, "pmpt_abc") {
				t.Errorf("decision events %+v", rec.events)
			}
		})
	}

	t.Run("every declared tool allowed", func(t *testing.T) {
		ts, rec := governProxy(t, up.URL, nil, "tools:\n  web_search: {enabled: true}\n")
		resp, b := postTo(t, ts, PathResponses, body, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if got := gjson.GetBytes(up.lastBody(t), "prompt").Raw; got != prompt {
			t.Errorf("prompt upstream %s", got)
		}
		if v := rec.verdicts(); len(v) != 1 || v[audit.KindStoredPrompt+"/prompt"] != audit.VerdictAllowed {
			t.Errorf("decisions %v", v)
		}
	})

	t.Run("null is no stored prompt", func(t *testing.T) {
		ts, _ := governProxy(t, up.URL, vetProtocol("refuse"), "")
		resp, b := postTo(t, ts, PathResponses, `{"model":"gpt-4.1","prompt":null,"input":"go"}`, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	})

	t.Run("not an object", func(t *testing.T) {
		ts, _ := governProxy(t, up.URL, nil, "")
		for _, v := range []string{`"pmpt_abc"`, `[]`, `true`, `{"version":"2"}`, `{"id":7}`, `{"id":""}`} {
			before := up.count()
			resp, b := postTo(t, ts, PathResponses, `{"model":"gpt-4.1","prompt":`+v+`,"input":"go"}`, nil)
			assertAPIError(t, resp, b, http.StatusBadRequest, "invalid_request")
			if p := gjson.GetBytes(b, "error.param").String(); !strings.HasPrefix(p, "prompt") {
				t.Errorf("%s: param %q", v, p)
			}
			if up.count() != before {
				t.Errorf("%s: a refused request reached the upstream", v)
			}
		}
	})
}

// TestChatWebSearchNotACallableTool: an allowed web_search_options lets the upstream search, but it
// declares no function: a tool call named web_search in the response is a call of an undeclared
// tool, blocked. A function the client declared under that name stays callable.
func TestChatWebSearchNotACallableTool(t *testing.T) {
	call := `{"id":"call_ws","type":"function","function":{"name":"web_search","arguments":"{\"q\":\"SECRET\"}"}}`
	up := jsonUpstream(t, completionWithCalls(call))
	ts, rec := governProxy(t, up.URL, toolsProtocol("searcher", `{"allow":["web_search","get_weather"]}`), "")
	msgs := `"model":"m","messages":[{"role":"user","content":"x"}],"web_search_options":{}`
	resp, b := postJSON(t, ts, `{`+msgs+`}`, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if strings.Contains(string(b), "call_ws") || strings.Contains(string(b), "SECRET") || resp.Header.Get(HeaderBlocked) != "1" {
		t.Errorf("the call reached the client (%q): %s", resp.Header.Get(HeaderBlocked), b)
	}
	if v := rec.verdicts(); v[audit.KindToolCall+"/web_search"] != audit.VerdictBlocked {
		t.Errorf("decisions %v", v)
	}
	resp, b = postJSON(t, ts, `{`+msgs+`,"tools":[{"type":"function","function":{"name":"web_search","parameters":{"type":"object"}}}]}`, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "call_ws") || resp.Header.Get(HeaderBlocked) != "" {
		t.Errorf("the declared function's call was not released (%d %q): %s", resp.StatusCode, resp.Header.Get(HeaderBlocked), b)
	}
}

// TestAnthropicMCPServers: Anthropic's MCP connector (`mcp_servers`, and the `mcp_toolset` entries
// of `tools` that refer to them) lets the model call every tool of a remote server, run by
// Anthropic, with no tool_use block for the proxy to vet. Both are governed as the tool `mcp`, as
// the Responses API's `mcp` type is: where `mcp` is not allowed, they never reach the upstream.
func TestAnthropicMCPServers(t *testing.T) {
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

// TestAnthropicMCPAllowed: where `mcp` is allowed (built-in protocols allow every declared tool),
// the MCP connector works as before, byte for byte.
func TestAnthropicMCPAllowed(t *testing.T) {
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

// TestBuiltinToolVersions: a built-in Responses tool that the operator switched off, denied or
// restricted by one of its names stays out under its other names (versions with and without
// _preview or a date, the computer tool's three names): a client cannot pick another version to get
// around the removal.
func TestBuiltinToolVersions(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"resp_1","object":"response","status":"completed","output":[]}`)
	})
	cfg := "tools:\n  web_search: {enabled: false}\n  computer_use_preview: {allowedProtocols: [system]}\n"
	e := testEngine(t, cfg, nil, nil, nil)
	u, _ := url.Parse(up.URL + "/v1")
	s, err := New(Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}}})
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

// newAnthNeutralProxy serves promptgate with its built-in defaults (protocol neutral: every
// declared tool allowed) in front of an Anthropic stand-in.
func newAnthNeutralProxy(t *testing.T, anthUp string) *httptest.Server {
	t.Helper()
	e := testEngine(t, "", nil, nil, nil)
	ou, _ := url.Parse("http://127.0.0.1:1/v1")
	au, _ := url.Parse(anthUp + "/v1")
	s, err := New(Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: ou}, "anthropic": {URL: au}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}
