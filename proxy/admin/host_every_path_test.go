package admin

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/proxy/console"
)

// TestHostRuleOnEveryPath: with an admin token set, every path of the admin listener — the
// token-less /metrics and console pages and static files, the API with the right token, an unknown
// path — refuses a Host that a DNS-rebinding page would send (a name that is neither loopback nor
// listed in listen.hosts) with 403 host_not_allowed, before anything of the path is read; loopback
// Hosts, IP addresses and listed names (any port, any letter case, a final dot) are answered.
// Without a token, only loopback Hosts are.
func TestHostRuleOnEveryPath(t *testing.T) {
	t.Parallel()
	const secret = "promptgate_up 1\n"
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, secret) })
	paths := map[string]int{
		PathMetrics:                           http.StatusOK,
		console.Prefix:                        http.StatusOK,
		console.Prefix + "static/console.css": http.StatusOK,
		console.Prefix + "static/common.js":   http.StatusOK,
		"/admin/templates":                    http.StatusOK,
		"/admin/health":                       http.StatusOK,
		"/admin/audit?limit=1":                http.StatusOK,
		"/admin/tests":                        http.StatusMethodNotAllowed,
		"/no/such/path":                       http.StatusNotFound,
	}
	for _, p := range console.Pages() {
		paths[console.Prefix+p.Name] = http.StatusOK
	}
	foreign := []string{"attacker.example", "attacker.example:8788", "127.0.0.1.attacker.example:8788",
		"localhost.attacker.example", "admin.internal.attacker.example", "internal:8788", "10.0.0.1.nip.io"}
	answered := []string{"127.0.0.1:8788", "localhost", "[::1]:8788", "10.2.3.4:8788", "[fd00::5]:8788",
		"admin.internal:8788", "ADMIN.Internal.", "x.svc.cluster.local"}
	f := newFixture(t, fixtureOpts{metrics: metrics, token: "s3cret", options: func(o *Options) {
		o.Hosts = []string{"admin.internal", "*.cluster.local"}
	}})
	get := func(path, host string) (*http.Response, []byte) {
		t.Helper()
		return getWithHost(t, f, path, host)
	}
	for path, want := range paths {
		for _, host := range foreign {
			resp, b := get(path, host)
			assertError(t, resp, b, http.StatusForbidden, "host_not_allowed")
			if strings.Contains(string(b), "promptgate_up") || strings.Contains(string(b), "<html") {
				t.Errorf("GET %s, Host %s: the refusal shows the path's content: %s", path, host, b)
			}
		}
		for _, host := range answered {
			if resp, b := get(path, host); resp.StatusCode != want {
				t.Errorf("GET %s, Host %s: status %d, want %d: %s", path, host, resp.StatusCode, want, b)
			}
		}
	}
	if _, b := get(PathMetrics, "10.2.3.4"); string(b) != secret {
		t.Errorf("metrics on an address Host: %q", b)
	}

	noToken := newFixture(t, fixtureOpts{metrics: metrics, options: func(o *Options) { o.Hosts = []string{"admin.internal"} }})
	for path := range paths {
		for _, host := range append(foreign, "10.2.3.4:8788", "admin.internal") {
			resp, b := getWithHost(t, noToken, path, host)
			assertError(t, resp, b, http.StatusForbidden, "host_not_allowed")
		}
	}
}

// getWithHost sends GET path with the fixture's token, addressed to host.
func getWithHost(t *testing.T, f *fixture, path, host string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if f.token != "" {
		req.Header.Set("Authorization", "Bearer "+f.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}
