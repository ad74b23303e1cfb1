package mcp_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/mcp"
)

// fastServer is an MCP server that answers at once, in JSON: tools/list with the crm tools,
// tools/call with one text result, anything else with an empty result. It keeps the benchmarks to
// what the door adds.
func fastServer(tb testing.TB) string {
	tb.Helper()
	const list = `{"tools":[{"name":"send_email","description":"Sends an email.","inputSchema":{"type":"object",` +
		`"properties":{"to":{"type":"string"},"body":{"type":"string"}},"required":["to"]}},` +
		`{"name":"lookup","description":"Looks a contact up.","inputSchema":{"type":"object","properties":{"name":{"type":"string"}}}}]}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		id := gjson.GetBytes(b, "id").Raw
		result := `{}`
		switch gjson.GetBytes(b, "method").String() {
		case "tools/list":
			result = list
		case "tools/call":
			result = `{"content":[{"type":"text","text":"sent"}]}`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+id+`,"result":`+result+`}`)
	}))
	tb.Cleanup(srv.Close)
	return srv.URL
}

// BenchmarkToolsCall: one vetted tools/call (the door reads and checks the body, vets the arguments
// against the pinned schema and the argument rules, claims the join, forwards and relays the
// answer) beside the same request through a bare httputil.ReverseProxy, with a mail body of 1 KiB
// and of 64 KiB.
func BenchmarkToolsCall(b *testing.B) {
	up := fastServer(b)
	f := newFixture(b, mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: up, ToolPrefix: "crm_"}}}, proxy.Limits{})
	target, _ := url.Parse(up)
	bare := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	b.Cleanup(bare.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	send := func(b *testing.B, u, body string) {
		req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", mcp.Version20251125)
		req.Header.Set("X-Promptgate-Protocol", "agent")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"sent"`)) {
			b.Fatalf("%d %s", resp.StatusCode, out)
		}
	}
	door := f.url + mcp.PathPrefix + "crm"
	send(b, door, `{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"lookup","arguments":{"name":"ann"}}}`) // pins the list
	for _, size := range []int{1 << 10, 64 << 10} {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"send_email","arguments":{"to":"ann@acme.com","body":"` +
			strings.Repeat("a", size) + `"}}}`
		for _, c := range []struct{ name, url string }{{"door", door}, {"bare", bare.URL}} {
			b.Run(c.name+"/"+strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					send(b, c.url, body)
				}
			})
		}
	}
}
