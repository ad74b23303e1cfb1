package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
	"github.com/promptgate/promptgate/store/etcdstore"
	"github.com/promptgate/promptgate/store/etcdstore/etcdtest"
)

// --- the console's pages and the listener's browser rules ---

func TestConsoleServedWithoutTokenDataNeedsIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{token: "tok"})
	for _, p := range []string{"/console/", "/console/decisions", "/console/preview", "/console/definitions", "/console/tools", "/console/mcp", "/console/health"} {
		resp, b := f.do("GET", p, "", "Authorization", "")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(string(b), `<script src="/console/static/common.js" defer></script>`) {
			t.Errorf("%s: %d %s", p, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	for p, ct := range map[string]string{"/console/static/common.js": "text/javascript; charset=utf-8", "/console/static/console.css": "text/css; charset=utf-8"} {
		if resp, _ := f.do("GET", p, "", "Authorization", ""); resp.StatusCode != 200 || resp.Header.Get("Content-Type") != ct {
			t.Errorf("%s: %d %q", p, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	for _, p := range []string{"/console/nope", "/console/static/", "/console/static/nope.js", "/console/static/../console.go", "/console/templates/layout.html"} {
		if resp, _ := f.do("GET", p, "", "Authorization", ""); resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404", p, resp.StatusCode)
		}
	}
	// The pages' data is the admin API's, with the token.
	f.fails(401, "unauthorized", "GET", "/admin/audit", "", "Authorization", "")
	f.fails(405, "method_not_allowed", "POST", "/console/decisions", "{}")
	// A credential in a console URL is refused like anywhere else.
	f.fails(400, "token_in_query", "GET", "/console/decisions?token=tok", "", "Authorization", "")
}

func TestConsoleKeepsTheHostRuleWithoutToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{})
	if resp, _ := f.do("GET", "/console/", ""); resp.StatusCode != 200 {
		t.Fatalf("loopback: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest("GET", f.srv.URL+"/console/", nil)
	req.Host = "console.attacker.example"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a rebound name got %d", resp.StatusCode)
	}
}

func TestCrossSiteRequestsRefused(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"tok", ""} {
		f := newFixture(t, fixtureOpts{token: token})
		own := "http://" + strings.TrimPrefix(f.srv.URL, "http://")
		paths := []struct{ method, path, body string }{
			{"GET", "/admin/templates", ""},
			{"GET", "/admin/audit", ""},
			{"GET", "/admin/health", ""},
			{"POST", "/admin/prompts/preview", `{"request":` + chatRequest + `}`},
			{"PUT", "/admin/tools/web_fetch/enabled", `{"enabled":true}`},
			{"GET", "/console/", ""},
			{"GET", "/console/static/common.js", ""},
		}
		refused := [][]string{
			{"Sec-Fetch-Site", "cross-site"},
			{"Sec-Fetch-Site", "same-site"}, // another port of the same host
			{"Origin", "http://attacker.example"},
			{"Origin", "null"},
			{"Origin", own + "0"}, // another port
			{"Origin", "file://"},
			{"Origin", "http://127.0.0.1.attacker.example"},
			{"Sec-Fetch-Site", "same-origin", "Origin", "http://attacker.example"},
		}
		for _, p := range paths {
			for _, h := range refused {
				t.Run(fmt.Sprintf("token %v %s %s %v", token != "", p.method, p.path, h), func(t *testing.T) {
					resp, b := f.do(p.method, p.path, p.body, h...)
					e := assertError(t, resp, b, http.StatusForbidden, "origin_not_allowed")
					if !strings.Contains(e.Get("message").String(), "web pages cannot use this listener") {
						t.Fatalf("message %s", e.Get("message"))
					}
				})
			}
			for _, h := range [][]string{{"Sec-Fetch-Site", "same-origin", "Origin", own}, {"Sec-Fetch-Site", "none"}, {"Origin", strings.ToUpper(own)}} {
				if resp, b := f.do(p.method, p.path, p.body, h...); resp.StatusCode >= 400 {
					t.Errorf("token %v %s %s %v: %d %s", token != "", p.method, p.path, h, resp.StatusCode, b)
				}
			}
		}
	}
}

func TestSecurityHeadersOnEveryAnswer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{token: "tok", metrics: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})})
	for _, c := range []struct{ method, path string }{
		{"GET", "/console/"}, {"GET", "/console/static/decisions.js"}, {"GET", "/admin/templates"}, {"GET", "/metrics"},
		{"GET", "/admin/nowhere"}, {"OPTIONS", "/admin/templates"},
	} {
		resp, _ := f.do(c.method, c.path, "")
		h := resp.Header
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "frame-ancestors 'none'", "object-src 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s %s: CSP %q lacks %q", c.method, c.path, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "*") {
			t.Errorf("%s: CSP %q is not strict", c.path, csp)
		}
		if h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") != "no-referrer" ||
			h.Get("Access-Control-Allow-Origin") != "" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("%s %s: headers %v", c.method, c.path, h)
		}
	}
}

// crossSite is the admin listener's browser check of r, nil when it passes.
func crossSite(t testing.TB, r *http.Request) *guard.Refusal {
	p, err := guard.New(guard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return p.CheckBrowser(r)
}

func TestCrossSite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		host    string
		headers map[string]string
		refused bool
	}{
		{"127.0.0.1:8788", nil, false},
		{"127.0.0.1:8788", map[string]string{"Origin": "http://127.0.0.1:8788"}, false},
		{"admin.example.com", map[string]string{"Origin": "https://admin.example.com"}, false},
		{"127.0.0.1:8788", map[string]string{"Origin": "http://127.0.0.1:8787"}, true},
		{"127.0.0.1:8788", map[string]string{"Origin": "http://localhost:8788"}, true},
		{"127.0.0.1:8788", map[string]string{"Origin": "ws://127.0.0.1:8788"}, true},
		{"127.0.0.1:8788", map[string]string{"Origin": "%zz"}, true},
		{"127.0.0.1:8788", map[string]string{"Sec-Fetch-Site": "cross-site"}, true},
		{"127.0.0.1:8788", map[string]string{"Sec-Fetch-Site": "something-new"}, true},
	} {
		r, _ := http.NewRequest("GET", "http://"+c.host+"/admin/templates", nil)
		for k, v := range c.headers {
			r.Header.Set(k, v)
		}
		if got := crossSite(t, r); (got != nil) != c.refused {
			t.Errorf("%s %v: %v", c.host, c.headers, got)
		}
	}
}

// --- audit: until and the summary ---

func TestAuditUntil(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{token: "t"})
	base := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	for i, id := range []string{"a", "b", "c"} {
		f.ring.Record(context.Background(), audit.Event{Time: base.Add(time.Duration(i) * time.Minute), RequestID: id, Kind: audit.KindToolCall, Verdict: audit.VerdictBlocked})
	}
	ids := func(q string) string {
		var out []string
		for _, e := range f.events(q) {
			out = append(out, e.RequestID)
		}
		return strings.Join(out, ",")
	}
	if got := ids("?until=" + base.Add(2*time.Minute).Format(time.RFC3339)); got != "b,a" {
		t.Errorf("until: %s", got)
	}
	if got := ids("?since=" + base.Add(time.Minute).Format(time.RFC3339) + "&until=" + base.Add(2*time.Minute).Format(time.RFC3339)); got != "b" {
		t.Errorf("since and until: %s", got)
	}
	f.fails(400, "invalid_request", "GET", "/admin/audit?until=yesterday", "")
	f.fails(400, "invalid_request", "GET", "/admin/audit?since=2026-02-24T10:00:00Z&until=2026-02-24T10:00:00Z", "")
}

func TestAuditSummary(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{token: "t"})
	now := time.Now().UTC()
	ctx := context.Background()
	rec := func(ago time.Duration, kind, verdict, reason string) {
		f.ring.Record(ctx, audit.Event{Time: now.Add(-ago), Kind: kind, Verdict: verdict, Reason: reason, Tool: "x"})
	}
	// Recorded oldest first, as the proxy records them.
	rec(30*time.Hour, audit.KindToolCall, audit.VerdictBlocked, "not allowed") // in neither window
	rec(3*time.Hour, audit.KindToolCall, audit.VerdictBlocked, "not allowed")  // only in the day
	rec(40*time.Minute, audit.KindActivated, audit.VerdictChanged, "")         // not counted: a change
	rec(30*time.Minute, audit.KindToolCall, audit.VerdictAllowed, "")          // not counted: allowed
	rec(20*time.Minute, audit.KindToolRemoved, audit.VerdictRemoved, "disabled by the operator")
	rec(12*time.Minute, audit.KindToolCall, audit.VerdictBlocked, "arguments do not match schema: at /n: want integer")
	rec(10*time.Minute, audit.KindToolCall, audit.VerdictBlocked, "arguments do not match schema: at /url: want string")
	rec(0, audit.KindToolCall, audit.VerdictBlocked, strings.Repeat("é", 40)+" tail")

	var hour summaryReply
	if err := json.Unmarshal(f.ok(200, "GET", "/admin/audit/summary", ""), &hour); err != nil {
		t.Fatal(err)
	}
	if hour.Window != "1h" || hour.Total != 4 || !hour.Covered || len(hour.Buckets) != 12 {
		t.Fatalf("hour: %+v", hour)
	}
	if r := hour.Reasons[0]; r.Kind != audit.KindToolCall || r.Reason != "arguments do not match schema" || r.Count != 2 {
		t.Errorf("the two schema failures are not one reason: %+v", hour.Reasons)
	}
	sum := 0
	for i, b := range hour.Buckets {
		sum += b.Count
		if i > 0 && !b.Start.Equal(hour.Buckets[i-1].Start.Add(5*time.Minute)) {
			t.Errorf("bucket %d starts at %v", i, b.Start)
		}
	}
	if sum != 4 || hour.Buckets[11].Count < 1 {
		t.Errorf("buckets %+v", hour.Buckets)
	}
	long := ""
	for _, r := range hour.Reasons {
		if strings.HasPrefix(r.Reason, "é") {
			long = r.Reason
		}
	}
	if len(long) > audit.MaxReasonHead || !strings.HasPrefix(long, "éé") || !utf8Valid(long) {
		t.Errorf("a long reason is not cut to a valid head: %q", long)
	}
	if !slicesContain(hour.Filters.Kinds, audit.KindToolEnablement) || !slicesContain(hour.Filters.Verdicts, audit.VerdictBlocked) {
		t.Errorf("filters %+v", hour.Filters)
	}
	// The information-flow decisions are listed too, for the console's menus.
	for _, k := range []string{audit.KindProvenance, audit.KindFlow, audit.KindBudget, audit.KindConfirm} {
		if !slicesContain(hour.Filters.Kinds, k) {
			t.Errorf("filters: no kind %s in %v", k, hour.Filters.Kinds)
		}
	}
	for _, v := range []string{audit.VerdictHeld, audit.VerdictConfirmed, audit.VerdictExpired, audit.VerdictReused} {
		if !slicesContain(hour.Filters.Verdicts, v) {
			t.Errorf("filters: no verdict %s in %v", v, hour.Filters.Verdicts)
		}
	}
	day := gjson.ParseBytes(f.ok(200, "GET", "/admin/audit/summary?window=24h", ""))
	if day.Get("total").Int() != 5 || len(day.Get("buckets").Array()) != 24 {
		t.Errorf("day: %s", day.Raw)
	}
	f.fails(400, "invalid_request", "GET", "/admin/audit/summary?window=7d", "")
	f.fails(400, "invalid_request", "GET", "/admin/audit/summary?since=x", "")
	f.fails(401, "unauthorized", "GET", "/admin/audit/summary", "", "Authorization", "")

	noRing := newFixture(t, fixtureOpts{token: "t", noAudit: true})
	if got := gjson.ParseBytes(noRing.ok(200, "GET", "/admin/audit/summary", "")); got.Get("total").Int() != 0 || !got.Get("covered").Bool() {
		t.Errorf("without a ring: %s", got.Raw)
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// --- tools ---

func TestToolInventory(t *testing.T) {
	t.Parallel()
	off := false
	f := newFixture(t, fixtureOpts{token: "t", observed: true, toolPolicy: map[string]policy.ToolConfig{
		"observe_user": {Scope: "observer", AllowedProtocols: []string{"private", "system"}},
		"web_fetch":    {Enabled: &off},
	}})
	up := newRecordingUpstream(t)
	ts := f.proxyFor(up)
	chat(t, ts, chatRequest, nil) // declares web_fetch (off in the config) and search_docs
	f.ok(200, "PUT", "/admin/tools/shell/enabled", `{"enabled":false}`, HeaderActor, "ops")

	var got struct{ Tools []inventoryTool }
	if err := json.Unmarshal(f.ok(200, "GET", "/admin/tools/inventory", ""), &got); err != nil {
		t.Fatal(err)
	}
	by := map[string]inventoryTool{}
	var names []string
	for _, tl := range got.Tools {
		by[tl.Name] = tl
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "observe_user,search_docs,shell,web_fetch" {
		t.Fatalf("tools %v", names)
	}
	if o := by["observe_user"]; !o.Enabled || o.EnabledBy != enabledByDefault || o.Config == nil || o.Config.Scope != "observer" || o.Seen != nil {
		t.Errorf("observe_user %+v", o)
	}
	if w := by["web_fetch"]; w.Enabled || w.EnabledBy != enabledByConfig || w.Seen == nil || w.Seen.LastKept || w.Seen.LastReason != "disabled by the operator" || w.Seen.Requests != 1 {
		t.Errorf("web_fetch %+v seen %+v", w, w.Seen)
	}
	if s := by["search_docs"]; !s.Enabled || s.Config != nil || s.Seen == nil || !s.Seen.LastKept || s.Seen.LastProtocol != "neutral" {
		t.Errorf("search_docs %+v", s)
	}
	if s := by["shell"]; s.Enabled || s.EnabledBy != enabledByOverride || s.Override == nil || s.Override.Author != "ops" || s.Seen != nil {
		t.Errorf("shell %+v", s)
	}
	// The kill switch wins over the config, both ways.
	f.ok(200, "PUT", "/admin/tools/web_fetch/enabled", `{"enabled":true}`)
	chat(t, ts, chatRequest, nil)
	if w := gjson.GetBytes(f.ok(200, "GET", "/admin/tools/inventory", ""), `tools.#(name=="web_fetch")`); !w.Get("enabled").Bool() ||
		w.Get("enabledBy").String() != enabledByOverride || !w.Get("seen.lastKept").Bool() || w.Get("seen.requests").Int() != 2 {
		t.Errorf("web_fetch after the override: %s", w.Raw)
	}
	f.fails(400, "invalid_request", "GET", "/admin/tools/inventory?all=1", "")
}

// --- health ---

func TestHealth(t *testing.T) {
	t.Parallel()
	stale := ""
	f := newFixture(t, fixtureOpts{token: "t", observed: true, options: func(o *Options) {
		o.Stale = func() string { return stale }
		o.Plugins = func() []plugins.SourceStatus {
			return []plugins.SourceStatus{
				{Name: "memory", Module: "memory", Up: true, UpSince: time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC), Restarts: 2},
				{Name: "profile", Module: "profile", Required: true, Down: "restarting after the process exited"},
			}
		}
	}})
	up := newRecordingUpstream(t)
	ts := f.proxyFor(up)
	for range 3 {
		chat(t, ts, chatRequest, nil)
	}
	for _, d := range []time.Duration{2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond} {
		f.metrics.Plugin("memory", d, "")
	}
	f.metrics.Plugin("memory", 150*time.Millisecond, "timeout")

	// The proxy counts a request once its handler has returned, which can be just after the client
	// has read the answer.
	var h gjson.Result
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		h = gjson.ParseBytes(f.ok(200, "GET", "/admin/health", ""))
		if h.Get("requests.total").Int() >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if h.Get("store.backend").String() != "bbolt" || !h.Get("store.connected").Bool() || h.Get("store.stale").String() != "" || h.Get("store.endpoints").Exists() {
		t.Errorf("store %s", h.Get("store").Raw)
	}
	if h.Get("requests.total").Int() != 3 || h.Get("requests.byStatus.200").Int() != 3 {
		t.Errorf("requests %s", h.Get("requests").Raw)
	}
	if h.Get("overhead.count").Int() != 3 || h.Get("overhead.p50Seconds").Float() <= 0 || h.Get("overhead.p99Seconds").Float() < h.Get("overhead.p50Seconds").Float() {
		t.Errorf("overhead %s", h.Get("overhead").Raw)
	}
	if h.Get(`served.#(name=="neutral").version`).Int() != 1 || h.Get(`served.#(name=="base_tool_call_v2").kind`).String() != "template" {
		t.Errorf("served %s", h.Get("served").Raw)
	}
	mem := h.Get(`plugins.#(name=="memory")`)
	if !mem.Get("up").Bool() || mem.Get("restarts").Int() != 2 || mem.Get("calls").Int() != 4 || mem.Get("errors.timeout").Int() != 1 ||
		mem.Get("latency.p50Seconds").Float() < 0.0025 || mem.Get("latency.p50Seconds").Float() > 0.005 || mem.Get("latency.p99Seconds").Float() < 0.1 {
		t.Errorf("memory %s", mem.Raw)
	}
	if p := h.Get(`plugins.#(name=="profile")`); p.Get("up").Bool() || !p.Get("required").Bool() || p.Get("down").String() == "" || p.Get("calls").Int() != 0 {
		t.Errorf("profile %s", p.Raw)
	}
	if h.Get("audit.written").Int() < 0 || !h.Get("audit.dropped").Exists() {
		t.Errorf("audit %s", h.Get("audit").Raw)
	}
	stale = "reload failed: store: boom"
	if got := gjson.GetBytes(f.ok(200, "GET", "/admin/health", ""), "store.stale").String(); got != stale {
		t.Errorf("stale %q", got)
	}
	f.fails(400, "invalid_request", "GET", "/admin/health?x=1", "")

	// Without metrics, plugins or a ring the report still answers, with those parts empty.
	bare := newFixture(t, fixtureOpts{token: "t", noAudit: true})
	b := gjson.ParseBytes(bare.ok(200, "GET", "/admin/health", ""))
	if b.Get("requests.total").Int() != 0 || len(b.Get("served").Array()) != 0 || len(b.Get("plugins").Array()) != 0 || b.Get("audit").Exists() {
		t.Errorf("bare %s", b.Raw)
	}
}

func TestHealthOfAnEtcdStore(t *testing.T) {
	t.Parallel()
	srv := etcdtest.Start(t)
	st, err := etcdstore.Open(context.Background(), etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: "/pg-health/", Validate: proxy.ValidateDefinition})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	h, err := New(Options{Store: st, Preview: func(context.Context, proxy.Input) ([]byte, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://127.0.0.1/admin/health", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	got := gjson.ParseBytes(rec.Body.Bytes())
	if rec.Code != 200 || got.Get("store.backend").String() != "etcd" || got.Get("store.prefix").String() != "/pg-health/" ||
		got.Get("store.endpoints").String() == "" || !got.Get("store.connected").Bool() {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
	if u, err := url.Parse(srv.Endpoint()); err != nil || !strings.Contains(got.Get("store.endpoints").String(), u.Host) {
		t.Errorf("endpoints %s, server %s", got.Get("store.endpoints"), srv.Endpoint())
	}
}

func TestHistogramQuantiles(t *testing.T) {
	t.Parallel()
	m := metricsWith(t, []float64{0.0007, 0.0008, 0.0015, 0.002, 0.02})
	got := histogram(m)
	// Buckets (…0.0005], (0.0005, 0.001], (0.001, 0.0025], …: rank 2.5 falls in (0.001, 0.0025]
	// holding the 3rd and 4th samples, a quarter of the way in; rank 4.95 falls in (0.01, 0.025],
	// 95% of the way in.
	if got.Count != 5 || !near(got.P50, 0.001+0.0015*0.25) || !near(got.P99, 0.01+0.015*0.95) {
		t.Errorf("%+v", got)
	}
	if z := histogram(nil); z != (latency{}) {
		t.Errorf("empty: %+v", z)
	}
	if over := histogram(metricsWith(t, []float64{100, 200})); over.P50 != 60 || over.P99 != 60 {
		t.Errorf("above every bucket: %+v (want the highest bound, 60)", over)
	}
}

// metricsWith observes each sample as the proxy's overhead, and returns the histogram's series.
func metricsWith(t *testing.T, samples []float64) []*dto.Metric {
	m := metrics.New(nil)
	route := m.Route("chat")
	for _, s := range samples {
		route.Overhead(time.Duration(s * float64(time.Second)))
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metricOverhead {
			return mf.GetMetric()
		}
	}
	t.Fatal("no overhead histogram")
	return nil
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
