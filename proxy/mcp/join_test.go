package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/mcp"
	"github.com/promptgate/promptgate/store"
)

// chatUpstream answers every chat completion with one call of crm_send_email.
func chatUpstream(t *testing.T, args string) *url.URL {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls",` +
			`"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"crm_send_email","arguments":` +
			jsonQuote(args) + `}}]}}]}`))
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/v1")
	return u
}

func jsonQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

const chatRequest = `{"model":"m","messages":[{"role":"user","content":"mail ann@acme.com hi"}],
 "tools":[{"type":"function","function":{"name":"crm_send_email","parameters":{"type":"object"}}}]}`

// TestJoinModelCallToMCPCall: with mcp.requireModelCall, the MCP call that executes a call the
// model made (released on the chat surface) passes once, in the conversation it was made in; a
// forged call no model made, a call whose arguments differ, the same call again and the call in
// another conversation are refused. The output of the executed call is mcp:crm when it comes back
// to the model.
func TestJoinModelCallToMCPCall(t *testing.T) {
	t.Parallel()
	_, up := crmServer(t, true)
	f := newFixture(t, mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: up, ToolPrefix: "crm_"}}, RequireModelCall: true}, proxy.Limits{})
	srv, err := proxy.New(proxy.Options{Engine: f.engine, Upstreams: map[string]proxy.Upstream{"openai": {URL: chatUpstream(t, `{"to":"ann@acme.com","body":"hi"}`)}}})
	if err != nil {
		t.Fatal(err)
	}
	pl := httptest.NewServer(srv)
	defer pl.Close()
	req, _ := http.NewRequest(http.MethodPost, pl.URL+"/v1/chat/completions", strings.NewReader(chatRequest))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Promptgate-Protocol", "agent")
	req.Header.Set("X-Promptgate-Conversation", "c-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("chat request: %v %v", err, resp)
	}
	resp.Body.Close()

	ctx := context.Background()
	cs := connect(t, f, "crm", mcp.Version20251125, http.Header{"X-Promptgate-Conversation": {"c-1"}})
	call := func(cs *sdk.ClientSession, tool string, args map[string]any) *sdk.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	other := connect(t, f, "crm", mcp.Version20251125, http.Header{"X-Promptgate-Conversation": {"c-2"}})
	if res := call(other, "send_email", map[string]any{"body": "hi", "to": "ann@acme.com"}); !res.IsError || !strings.Contains(resultText(res), "no model call") {
		t.Fatalf("the call in another conversation: %q", resultText(res))
	}
	if res := call(cs, "send_email", map[string]any{"body": "hi", "to": "ann@acme.com"}); res.IsError {
		t.Fatalf("the model's call: %q", resultText(res))
	}
	if res := call(cs, "send_email", map[string]any{"body": "hi", "to": "ann@acme.com"}); !res.IsError || !strings.Contains(resultText(res), "executed already") {
		t.Fatalf("the same call again: %q", resultText(res))
	}
	if res := call(cs, "send_email", map[string]any{"body": "hi", "to": "bob@acme.com"}); !res.IsError || !strings.Contains(resultText(res), "differ") {
		t.Fatalf("a call whose arguments differ: %q", resultText(res))
	}
	if res := call(cs, "lookup", map[string]any{"name": "ann"}); !res.IsError || !strings.Contains(resultText(res), "no model call") {
		t.Fatalf("a forged call: %q", resultText(res))
	}

	// The call's output comes back in the next request: it is the crm server's output.
	next := `{"model":"m","messages":[{"role":"user","content":"mail ann@acme.com hi"},
	 {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"crm_send_email","arguments":"{\"to\":\"ann@acme.com\",\"body\":\"hi\"}"}}]},
	 {"role":"tool","tool_call_id":"call_1","content":"sent to ann@acme.com"}],
	 "tools":[{"type":"function","function":{"name":"crm_send_email","parameters":{"type":"object"}}}]}`
	prep, err := f.engine.Prepare(ctx, proxy.Input{Path: proxy.PathChat, Header: http.Header{"X-Promptgate-Protocol": {"agent"}}, Body: []byte(next)})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, seg := range prep.Flow.Segments() {
		found = found || seg.Source.String() == "mcp:crm"
	}
	if !found {
		t.Fatalf("no segment of source mcp:crm in %+v", prep.Flow.Segments())
	}
}

// addProtocol stores and activates a protocol definition.
func addProtocol(t *testing.T, st store.Store, body string) {
	t.Helper()
	ctx := context.Background()
	v, err := st.AddVersion(ctx, store.KindProtocol, []byte(body), "test", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Activate(ctx, store.KindProtocol, gjson.Get(body, "id").String(), v); err != nil {
		t.Fatal(err)
	}
}

// TestRequireModelCallPerProtocol: a protocol's mcp.requireModelCall decides for its traffic, the
// config's mcp.requireModelCall where the protocol is silent.
func TestRequireModelCallPerProtocol(t *testing.T) {
	t.Parallel()
	_, up := crmServer(t, true)
	st := openStore(t)
	addProtocol(t, st, `{"id":"lax","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["*"]},"mcp":{"requireModelCall":false}}`)
	addProtocol(t, st, `{"id":"strict","promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["*"]},"mcp":{"requireModelCall":true}}`)
	cfg := mcp.Config{RequireModelCall: true, Servers: []mcp.Server{
		{Name: "lax", URL: up, Protocol: "lax"}, {Name: "strict", URL: up, Protocol: "strict"}, {Name: "silent", URL: up, Protocol: "agent", ToolPrefix: "crm_"}}}
	f := newFixtureOn(t, st, cfg, proxy.Limits{})
	for _, c := range []struct {
		server string
		refuse bool
	}{{"lax", false}, {"strict", true}, {"silent", true}} {
		cs := connect(t, f, c.server, mcp.Version20251125, nil)
		text, isErr := callText(t, cs, "lookup", map[string]any{"name": "ann"})
		if isErr != c.refuse || c.refuse && !strings.Contains(text, "no model call released this call (requireModelCall)") {
			t.Errorf("%s: %q (error %v), want refused %v", c.server, text, isErr, c.refuse)
		}
	}
	// Without the config's requirement, the strict protocol still requires the join.
	g := newFixtureOn(t, st, mcp.Config{Servers: []mcp.Server{{Name: "strict", URL: up, Protocol: "strict"}, {Name: "silent", URL: up, Protocol: "agent", ToolPrefix: "crm_"}}}, proxy.Limits{})
	if _, isErr := callText(t, connect(t, g, "strict", mcp.Version20251125, nil), "lookup", map[string]any{"name": "ann"}); !isErr {
		t.Error("strict protocol, config silent: an unmatched call passed")
	}
	if text, isErr := callText(t, connect(t, g, "silent", mcp.Version20251125, nil), "lookup", map[string]any{"name": "ann"}); isErr {
		t.Errorf("silent protocol, config silent: %q", text)
	}
}
