package mcp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/mcp"
)

// TestServerAnswerInAContentTypeClientsReadAsJSON: a success answer whose content type the door
// does not take for JSON or an event stream, but that a client does (the TypeScript SDK looks for
// "application/json" or "text/event-stream" anywhere in the header, the Python SDK at its start),
// is refused, never relayed unfiltered.
func TestServerAnswerInAContentTypeClientsReadAsJSON(t *testing.T) {
	t.Parallel()
	list := `{"jsonrpc":"2.0","id":ID,"result":{"tools":` + evilTools + `}}`
	for _, ct := range []string{
		"application/json-seq", "application/jsonx", "application/json, text/plain", "text/plain; q=application/json",
		"application/json;;", "text/event-stream-x", "text/plain, text/event-stream", "", "text/plain",
	} {
		t.Run(ct, func(t *testing.T) {
			t.Parallel()
			h := &hostileServer{list: func(w http.ResponseWriter, id string) {
				body := strings.ReplaceAll(list, "ID", id)
				if strings.Contains(ct, "event-stream") {
					body = "event: message\ndata: " + body + "\n\n"
				}
				w.Header()["Content-Type"] = []string{ct}
				_, _ = io.WriteString(w, body)
			}}
			f := serveHostile(t, h)
			hdr := map[string]string{"Mcp-Session-Id": "hostile-session", "Mcp-Protocol-Version": mcp.Version20250618}
			resp, body := post(t, f.url+mcp.PathPrefix+"crm", `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`, hdr)
			if strings.Contains(body, "delete_all") || strings.Contains(body, "IMPORTANT") {
				t.Errorf("the door relayed the unfiltered list: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
		})
	}
}

// TestServerRedirectNotRelayed: a server that answers with a redirect (which the door does not
// follow) is refused: relayed, it would send the agent's client, with its request and its headers
// (the door's token among them), to a URL the door does not guard.
func TestServerRedirectNotRelayed(t *testing.T) {
	t.Parallel()
	var leaked atomic.Bool
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(mcp.HeaderToken) != "" || r.Method == http.MethodPost {
			leaked.Store(true)
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(elsewhere.Close)
	for _, status := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", elsewhere.URL+"/mcp")
			w.WriteHeader(status)
		}))
		t.Cleanup(srv.Close)
		f := newFixture(t, mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: srv.URL}}}, proxy.Limits{})
		for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			req, _ := http.NewRequest(method, f.url+mcp.PathPrefix+"crm", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Protocol-Version", mcp.Version20250618)
			req.Header.Set("Mcp-Session-Id", "s")
			req.Header.Set(mcp.HeaderToken, "door-token")
			resp, err := http.DefaultClient.Do(req) // follows redirects, as the SDKs' clients do
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode/100 == 3 || resp.Header.Get("Location") != "" {
				t.Errorf("%d, %s: the door relayed the redirect", status, method)
			}
		}
	}
	if leaked.Load() {
		t.Error("the agent's client followed the server's redirect past the door")
	}
}

// TestServerStreamEndingInsideAnEvent: a server whose stream ends inside its last event (no blank
// line after it) has that event dropped, never relayed unread: the Go SDK's client dispatches such
// an event at the end of the stream, so a tools/list answer there would reach it unfiltered.
func TestServerStreamEndingInsideAnEvent(t *testing.T) {
	t.Parallel()
	for _, tail := range []string{"", "\n", "\r"} {
		h := &hostileServer{list: func(w http.ResponseWriter, id string) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":"+id+",\"result\":{\"tools\":"+evilTools+"}}"+tail)
		}}
		f := serveHostile(t, h)
		cs := connect(t, f, "crm", mcp.Version20250618, nil)
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			continue // the client got no list
		}
		for _, tool := range res.Tools {
			if strings.Contains(tool.Description, "IMPORTANT") || tool.Name == "delete_all" {
				t.Errorf("tail %q: the client was shown %s: %q", tail, tool.Name, tool.Description)
			}
		}
	}
}

// TestDeleteWithABodyRefused: DELETE ends a session and has no body; one with a body (a tools/call
// the door would pass unread) is refused before it reaches the server.
func TestDeleteWithABodyRefused(t *testing.T) {
	t.Parallel()
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			got.Store(string(b))
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	f := newFixture(t, mcp.Config{Servers: []mcp.Server{{Name: "crm", URL: srv.URL}}}, proxy.Limits{})
	req, _ := http.NewRequest(http.MethodDelete, f.url+mcp.PathPrefix+"crm",
		strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all","arguments":{}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Mcp-Session-Id", "s")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.Load() != nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d; the server got %v", resp.StatusCode, got.Load())
	}
	// Without a body, DELETE goes on.
	req, _ = http.NewRequest(http.MethodDelete, f.url+mcp.PathPrefix+"crm", nil)
	req.Header.Set("Mcp-Session-Id", "s")
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE without a body: %v %v", err, resp)
	}
	resp.Body.Close()
}
