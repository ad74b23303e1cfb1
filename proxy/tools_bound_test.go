package proxy

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// toolsBody is a chat request declaring n tools named a (all but one removed as duplicates).
func toolsBody(n int) string {
	return `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[` +
		strings.TrimSuffix(strings.Repeat(`{"type":"function","function":{"name":"a"}},`, n), ",") + `]}`
}

// A request declares at most limits.maxTools tools: one over it is refused (400 invalid_request)
// before it is filtered, so that it records no decision and reaches no upstream. Each declared tool
// can be a decision event: 50,000 duplicates in 2.4 MB made 50,000 events, more than the whole
// audit ring holds, and filled the recorders' buffers so that other requests' decisions were
// dropped.
func TestDeclaredToolsBounded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t, okCompletion)
	rec := &memAudit{}
	u, _ := url.Parse(up.URL + "/v1")
	ts := serveProxy(t, Options{Engine: testEngine(t, "limits: {maxTools: 4}\n", nil, nil, nil), Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: u}}, Audit: rec})
	resp, b := sendTo(t, ts, "POST", PathChat, "", toolsBody(5), jsonType)
	assertAPIError(t, resp, b, http.StatusBadRequest, "invalid_request")
	if !strings.Contains(string(b), "limits.maxTools") {
		t.Errorf("the refusal does not name the limit: %s", b)
	}
	if up.count() != 0 || len(rec.events) != 0 {
		t.Fatalf("a request over the cap reached the upstream (%d) or recorded %d decisions", up.count(), len(rec.events))
	}
	if resp, b := sendTo(t, ts, "POST", PathChat, "", toolsBody(4), jsonType); resp.StatusCode != http.StatusOK {
		t.Fatalf("4 tools with limits.maxTools 4: %d %s", resp.StatusCode, b)
	}
	if len(rec.events) != 3 {
		t.Errorf("%d decisions for 3 duplicates", len(rec.events))
	}
	// The default holds without a config.
	ts = serveProxy(t, Options{Engine: testEngine(t, "", nil, nil, nil), Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: u}}, Audit: &memAudit{}})
	resp, b = sendTo(t, ts, "POST", PathChat, "", toolsBody(5000), jsonType)
	assertAPIError(t, resp, b, http.StatusBadRequest, "invalid_request")
}
