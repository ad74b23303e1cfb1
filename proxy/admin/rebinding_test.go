package admin

import (
	"io"
	"net/http"
	"testing"
)

// Without a token, a DNS-rebound name gets nothing from any path of the admin listener, the
// token-less /metrics included (it names the protocols, tools, plugins and their failures); a
// loopback Host still reads it. With a token, an address Host (scrapers address the pod) reads it,
// another name does not (TestHostRuleOnEveryPath has every path).
func TestNoTokenMetricsLoopbackOnly(t *testing.T) {
	t.Parallel()
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "promptgate_up 1\n") })
	get := func(f *fixture, host string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", f.srv.URL+PathMetrics, nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	f := newFixture(t, fixtureOpts{metrics: metrics})
	for _, host := range []string{"attacker.example:8788", "attacker.example", "127.0.0.1.attacker.example"} {
		resp, b := get(f, host)
		assertError(t, resp, b, http.StatusForbidden, "host_not_allowed")
	}
	if resp, b := get(f, "localhost:8788"); resp.StatusCode != http.StatusOK || string(b) != "promptgate_up 1\n" {
		t.Fatalf("loopback Host: %d %s", resp.StatusCode, b)
	}
	f = newFixture(t, fixtureOpts{metrics: metrics, token: "s3cret"})
	if resp, b := get(f, "10.2.3.4:8788"); resp.StatusCode != http.StatusOK || string(b) != "promptgate_up 1\n" {
		t.Fatalf("with a token, an address Host: %d %s", resp.StatusCode, b)
	}
	resp, b := get(f, "prometheus.scrape:8788")
	assertError(t, resp, b, http.StatusForbidden, "host_not_allowed")
}
