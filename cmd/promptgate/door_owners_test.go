package main

import (
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
)

// storingUpstream is a TLS Responses stand-in: a create gets the next id (resp_1, resp_2, ...), a
// request under /v1/responses/{id} answers that response; it counts the requests it receives.
type storingUpstream struct {
	*httptest.Server
	mu       sync.Mutex
	n        int
	requests int
}

func newStoringUpstream(t *testing.T) *storingUpstream {
	t.Helper()
	u := &storingUpstream{}
	u.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u.mu.Lock()
		u.requests++
		if r.Method == http.MethodPost && r.URL.Path == "/v1/responses" {
			u.n++
		}
		n := u.n
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		id := fmt.Sprintf("resp_%d", n)
		if r.Method != http.MethodPost {
			var ok bool
			if id, ok = strings.CutPrefix(r.URL.Path, "/v1/responses/"); !ok {
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"error":{"message":"no such route","type":"invalid_request_error","param":null,"code":null}}`)
				return
			}
		}
		_, _ = fmt.Fprintf(w, `{"id":%q,"object":"response","status":"completed","model":"m","instructions":null,"output":[{"type":"message","id":"msg_1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"stored","annotations":[]}]}],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`, id)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *storingUpstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.requests
}

// TestDoorBindsStoredResponsesToTheirCreator: through the HTTPS-proxy door, with the operator key
// bound to the intercepted origin, a response created by one client is retrieved by that client
// only: another credential retrieving it, continuing it or listing responses is answered by
// promptgate (404, 400 previous_response_not_found, 403) and nothing reaches the upstream.
func TestDoorBindsStoredResponsesToTheirCreator(t *testing.T) {
	up := newStoringUpstream(t)
	roots := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startDoorServe(t, operatorKeys, "hosts: [127.0.0.1], upstreamCA: "+roots, "--upstream", up.URL+"/v1")
	hc := s.client(t, nil)
	do := func(method, path, body, auth string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, up.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", auth)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status, b := do(http.MethodPost, "/v1/responses", `{"model":"m","input":"remember this"}`, "Bearer sk-alice")
	id := gjson.GetBytes(b, "id").Str
	if status != http.StatusOK || id == "" {
		t.Fatalf("create: %d %s", status, b)
	}
	before := up.count()
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"GET", "/v1/responses/" + id, "", http.StatusNotFound, "not_found"},
		{"GET", "/v1/responses/" + id + "/input_items", "", http.StatusNotFound, "not_found"},
		{"DELETE", "/v1/responses/" + id, "", http.StatusNotFound, "not_found"},
		{"POST", "/v1/responses", `{"model":"m","input":"what did I say?","previous_response_id":"` + id + `"}`, http.StatusBadRequest, "previous_response_not_found"},
		{"GET", "/v1/responses", "", http.StatusForbidden, "listing_not_allowed"},
	} {
		status, b := do(tc.method, tc.path, tc.body, "Bearer sk-bob")
		if status != tc.status || gjson.GetBytes(b, "error.code").Str != tc.code {
			t.Errorf("%s %s as another client: %d %s, want %d %s", tc.method, tc.path, status, b, tc.status, tc.code)
		}
	}
	if n := up.count() - before; n != 0 {
		t.Errorf("%d refused requests reached the upstream", n)
	}
	if status, b := do(http.MethodGet, "/v1/responses/"+id, "", "Bearer sk-alice"); status != http.StatusOK || gjson.GetBytes(b, "id").Str != id {
		t.Errorf("its creator's retrieval: %d %s", status, b)
	}
}
