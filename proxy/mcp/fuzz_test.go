package mcp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"unicode/utf8"
)

// sdkView is a message as an MCP server built on encoding/json reads it (the official Go SDK's
// jsonrpc2 and its typed params do): field names matched without regard to case, as bytes.EqualFold
// does.
type sdkView struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  *struct {
		Name      string          `json:"name"`
		URI       string          `json:"uri"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// compact is raw JSON without white space ("" for none).
func compact(raw []byte) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "invalid:" + string(raw)
	}
	return b.String()
}

// FuzzReadMessages holds the door's reading of a POST — the JSON-RPC body (parseBody) and, for a
// stateless request, its Mcp-Method and Mcp-Name headers (checkHeaders) — to the reading of the
// program that acts on it, an MCP server decoding with encoding/json: what the door accepts, the
// server reads as the same request or response, with the same method, id, tool name, uri and
// arguments; and the headers the door accepts name what the server runs.
func FuzzReadMessages(f *testing.F) {
	for _, seed := range []struct{ body, method, name string }{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup","arguments":{"name":"ann"}}}`, "tools/call", "lookup"},
		{`{"jsonrpc":"2.0","id":"a","method":"tools/list"}`, "tools/list", ""},
		{`{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"file:///a"}}`, "resources/read", "file:///a"},
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]`, "", ""},
		{`{"jsonrpc":"2.0","id":1,"result":{}}`, "", ""},
		{`{"jsonrpc":"2.0","id":1,"result":{},"Method":"tools/call"}`, "", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup","Arguments":{"name":"x"}}}`, "tools/call", "lookup"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"lookup","argumentſ":{"name":"x"}}}`, "tools/call", "lookup"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"NAME":"delete_all","name":"lookup"}}`, "tools/call", "lookup"},
		{`{"jsonrpc":"2.0","id":1,"meth\u006fd":"tools/call","params":{"name":"lookup"}}`, "tools/call", "lookup"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"=?base64?bG9va3Vw?="}}`, "tools/call", "=?base64?bG9va3Vw?="},
		{`{"jsonrpc":"2.0","id":1.0,"method":"ping"}`, "ping", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"ping","id":2}`, "ping", ""},
	} {
		f.Add([]byte(seed.body), seed.method, seed.name)
	}
	f.Fuzz(func(t *testing.T, body []byte, method, name string) {
		msgs, _, err := parseBody(body, 32)
		if err != nil {
			return
		}
		for _, m := range msgs {
			var sv sdkView
			if err := json.Unmarshal(m.raw, &sv); err != nil {
				t.Fatalf("the door accepted %q, which encoding/json refuses: %v", m.raw, err)
			}
			if sv.Method != m.method {
				t.Fatalf("%q: the door reads method %q, the server %q", m.raw, m.method, sv.Method)
			}
			if compact(sv.ID) != m.id {
				t.Fatalf("%q: the door reads id %q, the server %q", m.raw, m.id, compact(sv.ID))
			}
			if m.response != (sv.Method == "" && (sv.Result != nil || sv.Error != nil)) {
				t.Fatalf("%q: the door reads a response: %v, the server does not agree", m.raw, m.response)
			}
			if sv.Params != nil && m.method != "" {
				if got := m.params.Get("name"); got.String() != sv.Params.Name && (got.Exists() || sv.Params.Name != "") {
					t.Fatalf("%q: the door reads name %q, the server %q", m.raw, got.String(), sv.Params.Name)
				}
				if got := m.params.Get("uri"); got.String() != sv.Params.URI && (got.Exists() || sv.Params.URI != "") {
					t.Fatalf("%q: the door reads uri %q, the server %q", m.raw, got.String(), sv.Params.URI)
				}
				if got := m.params.Get("arguments"); compact([]byte(got.Raw)) != compact(sv.Params.Arguments) {
					t.Fatalf("%q: the door reads arguments %q, the server %q", m.raw, got.Raw, sv.Params.Arguments)
				}
			}
			if !utf8.ValidString(method) || !utf8.ValidString(name) {
				continue
			}
			h := http.Header{}
			h.Set(headerVersion, Version20260728)
			h[headerMethod] = []string{method}
			if name != "" {
				h[headerName] = []string{name}
			}
			if checkHeaders(h, m, nil) != nil {
				continue
			}
			if method != sv.Method {
				t.Fatalf("%q: Mcp-Method %q accepted for a request the server runs as %q", m.raw, method, sv.Method)
			}
			want := ""
			if sv.Params != nil {
				switch sv.Method {
				case "tools/call", "prompts/get":
					want = sv.Params.Name
				case "resources/read":
					want = sv.Params.URI
				}
			}
			if decodeHeader(name) != want && !(name == "" && want == "") {
				t.Fatalf("%q: Mcp-Name %q accepted for a request whose name the server reads as %q", m.raw, name, want)
			}
		}
	})
}
