package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
)

func TestMetricsAfterTraffic(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, completionWithCalls(badHost))
	})
	e := testEngine(t, "defaultProtocol: guarded\ntools:\n  delete_all: {enabled: false}\n", map[string]string{"PROMPT_RUNTIME_CONTEXT_MAX_CHARS": "100"}, nil, []json.RawMessage{vetProtocol("refuse")})
	m := metrics.New(e.defs.Versions)
	u, _ := url.Parse(up.URL + "/v1")
	s, err := New(Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}}, Metrics: m, Audit: audit.Multi{m}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	body := strings.Replace(vetRequest, `"model":"m"`, `"model":"m","promptgate":{"context":{"big":"`+strings.Repeat("x", 300)+`"}}`, 1)
	if resp, b := postJSON(t, ts, body, nil); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if resp, _ := postJSON(t, ts, `{"model":`, nil); resp.StatusCode != 400 {
		t.Fatal(resp.Status)
	}
	mts := httptest.NewServer(m.Handler())
	defer mts.Close()
	resp, err := http.Get(mts.URL)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`promptgate_requests_total{protocol="guarded",route="chat",status="200"} 1`,
		`promptgate_requests_total{protocol="none",route="chat",status="400"} 1`,
		`promptgate_proxy_overhead_seconds_count{route="chat"} 1`,
		`promptgate_upstream_seconds_count{route="chat"} 1`,
		// every rewritten route's series exists from the start (resolved when the listener is
		// built)
		`promptgate_proxy_overhead_seconds_count{route="messages"} 0`,
		`promptgate_upstream_seconds_count{route="responses"} 0`,
		`promptgate_tools_removed_total{reason="not in the protocol's allowlist"} 1`,
		`promptgate_tool_calls_blocked_total{reason="rule docs-only",verdict="blocked"} 1`,
		`promptgate_context_truncations_total 1`,
		`promptgate_definition_info{kind="protocol",name="guarded",version="1"} 1`,
		`promptgate_definition_info{kind="template",name="base_tool_call_v2",version="1"} 1`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Logf("%s", text)
	}
}
