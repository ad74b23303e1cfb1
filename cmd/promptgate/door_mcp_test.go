package main

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestDoorServesMCPOriginsThroughTheMCPDoor: an agent whose MCP client goes through the HTTPS-proxy
// door (HTTPS_PROXY=) to a configured MCP server's origin is served by the MCP door: the kill
// switch removes a tool from tools/list, a call is vetted and recorded as an mcp_call decision of
// that server, the first list pins the definitions in the store, and another path of that origin is
// not served.
func TestDoorServesMCPOriginsThroughTheMCPDoor(t *testing.T) {
	s := sdk.NewServer(&sdk.Implementation{Name: "crm", Version: "1"}, nil)
	type query struct {
		Name string `json:"name"`
	}
	for _, name := range []string{"lookup", "delete_all"} {
		sdk.AddTool(s, &sdk.Tool{Name: name, Description: "A crm tool."}, func(_ context.Context, _ *sdk.CallToolRequest, in query) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: name + " " + in.Name}}}, nil, nil
		})
	}
	up := httptest.NewTLSServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil))
	defer up.Close()
	roots := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ds := startDoorServeWith(t, nil, "hosts: [127.0.0.1], upstreamCA: "+roots,
		"mcp: {servers: [{name: crm, url: \""+up.URL+"/mcp\"}]}\ntools: {delete_all: {enabled: false}}\n")
	hc := ds.client(t, nil)

	ctx := context.Background()
	c := sdk.NewClient(&sdk.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: up.URL + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect through the door: %v", err)
	}
	defer cs.Close()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Equal(names, []string{"lookup"}) {
		t.Fatalf("tools listed through the door: %v, want lookup alone (delete_all is switched off)", names)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "lookup", Arguments: map[string]any{"name": "ann"}})
	if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*sdk.TextContent).Text != "lookup ann" {
		t.Fatalf("call through the door: %v %+v", err, res)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "delete_all", Arguments: map[string]any{"name": "ann"}})
	if err != nil || !res.IsError {
		t.Fatalf("call of a switched-off tool through the door: %v %+v", err, res)
	}

	// Another path of the MCP server's origin is not served.
	resp, err := hc.Get(up.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "MCP server") {
		t.Errorf("another path of the origin: %d %s", resp.StatusCode, b)
	}

	// The decisions are the MCP door's, and the pins are in the store.
	var audit struct {
		Events []struct{ Kind, Verdict, Target, Tool string } `json:"events"`
	}
	getAdmin(t, ds.admin, "/admin/audit?kind=mcp_call", &audit)
	var seen []string
	for _, e := range audit.Events {
		seen = append(seen, e.Tool+"/"+e.Verdict+"/"+e.Target)
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"delete_all/blocked/mcp/crm", "lookup/allowed/mcp/crm"}) {
		t.Errorf("mcp_call decisions: %v", seen)
	}
	var versions struct{ Active int }
	getAdmin(t, ds.admin, "/admin/mcppins/crm", &versions)
	if versions.Active != 1 {
		t.Errorf("the first list did not pin the definitions in the store: %+v", versions)
	}
}

// getAdmin reads a JSON answer of the admin listener.
func getAdmin(t *testing.T, addr, path string, v any) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
