package mcp_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/mcp"
)

// TestBadInput: what the door refuses before anything reaches the server, each with its JSON-RPC
// error.
func TestBadInput(t *testing.T) {
	t.Parallel()
	_, up := crmServerWith(t, &sdk.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	f := newFixture(t, mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: up, ToolPrefix: "crm_"}}},
		proxy.Limits{MaxBodyBytes: 4096, BodyReadTimeout: 300 * time.Millisecond})
	u := f.url + mcp.PathPrefix + "crm"
	stateless := map[string]string{"Mcp-Protocol-Version": mcp.Version20260728}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup","arguments":{"name":"ann"}}}`
	for _, c := range []struct {
		name, body string
		header     map[string]string
		status     int
		want       string
	}{
		{"method header differs", call, with(stateless, "Mcp-Method", "tools/list", "Mcp-Name", "lookup"), 200, "headers and body disagree"},
		{"name header differs", call, with(stateless, "Mcp-Method", "tools/call", "Mcp-Name", "send_email"), 200, "headers and body disagree"},
		{"name header missing", call, with(stateless, "Mcp-Method", "tools/call"), 200, "headers and body disagree"},
		{"param header bound to nothing", call, with(stateless, "Mcp-Method", "tools/call", "Mcp-Name", "lookup", "Mcp-Param-Name", "ann"), 200, "bound to no argument"},
		{"meta version differs", `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}`,
			with(stateless, "Mcp-Method", "tools/list"), 200, "headers and body disagree"},
		{"oversized", `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"` + strings.Repeat("a", 5000) + `"}}`, nil, 413, "maxBodyBytes"},
		{"malformed json", `{"jsonrpc":"2.0","id":1,"method":"ping"`, nil, 400, "-32700"},
		{"duplicate key", `{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/call"}`, nil, 400, "-32700"},
		{"case-variant key", `{"jsonrpc":"2.0","id":1,"method":"ping","Method":"tools/call"}`, nil, 400, "-32700"},
		{"case-variant member of params", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup","Arguments":{"name":"ann"}}}`, nil, 400, "letter case only"},
		{"member of params folded by Unicode", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup","argumentſ":{"name":"ann"}}}`, nil, 400, "letter case only"},
		{"a response with a case-variant method", `{"jsonrpc":"2.0","id":1,"result":{},"Method":"tools/call"}`, nil, 400, "letter case only"},
		{"not json-rpc 2.0", `{"jsonrpc":"1.0","id":1,"method":"ping"}`, nil, 400, "-32600"},
		{"id is an object", `{"jsonrpc":"2.0","id":{},"method":"ping"}`, nil, 400, "-32600"},
		{"unknown version", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, map[string]string{"Mcp-Protocol-Version": "2024-01-01"}, 400, "not served"},
		{"batch where the version has none", `[{"jsonrpc":"2.0","id":1,"method":"ping"}]`, map[string]string{"Mcp-Protocol-Version": mcp.Version20250618}, 400, "does not allow batches"},
		{"empty batch", `[]`, nil, 400, "empty batch"},
		{"unknown method", `{"jsonrpc":"2.0","id":7,"method":"admin/shutdown"}`, nil, 200, "-32601"},
	} {
		resp, body := post(t, u, c.body, c.header)
		if resp.StatusCode != c.status || !strings.Contains(body, c.want) {
			t.Errorf("%s: %d %s, want %d and %q", c.name, resp.StatusCode, body, c.status, c.want)
		}
		if strings.Contains(body, "ann") {
			t.Errorf("%s: the answer echoes an argument: %s", c.name, body)
		}
	}

	// A body that arrives too slowly is cut at limits.bodyReadTimeout.
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte(`{"jsonrpc":"2.0",`))
		time.Sleep(time.Second)
		_ = pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, u, pr)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestTimeout {
			t.Errorf("slow body: %d, want 408", resp.StatusCode)
		}
	}

	// An unknown method passes where the config says so: the server answers it.
	g := newFixture(t, mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: up}}, UnknownMethods: mcp.MethodsPass}, proxy.Limits{})
	resp, body := post(t, g.url+mcp.PathPrefix+"crm", `{"jsonrpc":"2.0","id":7,"method":"admin/shutdown"}`, nil)
	if strings.Contains(body, "promptgate") {
		t.Errorf("unknown method with unknownMethods: pass was answered by the door: %d %s", resp.StatusCode, body)
	}
	// A server the config does not name, and a wrong token.
	resp, _ = post(t, f.url+mcp.PathPrefix+"other", `{}`, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown server: %d", resp.StatusCode)
	}
}

// TestTokenRequired: with a token set, a request without it is 401 and nothing reaches the server.
func TestTokenRequired(t *testing.T) {
	t.Parallel()
	_, up := crmServer(t, true)
	f := newFixture(t, mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: up}}}, proxy.Limits{})
	d, err := mcp.New(mcp.Options{Config: mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: up}}}, Engine: f.engine, Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/mcp/crm", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		if tok != "" {
			req.Header.Set(mcp.HeaderToken, tok)
		}
		rec := newRecorder()
		d.ServeHTTP(rec, req)
		if rec.code != http.StatusUnauthorized {
			t.Errorf("token %q: %d, want 401", tok, rec.code)
		}
	}
}

// recorder is a minimal ResponseWriter.
type recorder struct {
	h    http.Header
	code int
	body strings.Builder
}

func newRecorder() *recorder                    { return &recorder{h: http.Header{}} }
func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) WriteHeader(c int)           { r.code = c }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }
