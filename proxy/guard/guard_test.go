package guard

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

func policy(t *testing.T, c Config) *Policy {
	t.Helper()
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoopbackHost(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"127.0.0.1", "127.0.0.1:1", "127.9.8.7:80", "[::1]:8788", "::1", "localhost", "LOCALHOST:1", "a.localhost:1", "localhost.:8787"} {
		if !LoopbackHost(h) {
			t.Errorf("%s not loopback", h)
		}
	}
	for _, h := range []string{"", "example.com", "10.0.0.1:80", "localhost.example.com", "[::2]:1", "0.0.0.0", "evil-localhost", "127.0.0.1.nip.io"} {
		if LoopbackHost(h) {
			t.Errorf("%s loopback", h)
		}
	}
}

func TestHostAllowed(t *testing.T) {
	t.Parallel()
	p := policy(t, Config{Hosts: []string{"Gateway.Internal", "*.svc.cluster.local", "10.0.0.5", "[fd00::1]"}})
	for _, h := range []string{"localhost:8787", "gateway.internal", "GATEWAY.internal:8787", "gateway.internal.", "pg.ns.svc.cluster.local:8787", "a.b.svc.cluster.local", "10.0.0.5:8787", "[fd00::1]:8787"} {
		if !p.HostAllowed(h) {
			t.Errorf("%s refused", h)
		}
	}
	for _, h := range []string{"", "attacker.example", "svc.cluster.local", "evilsvc.cluster.local", "gateway.internal.evil", "10.0.0.6", "[fd00::2]:1", "xgateway.internal"} {
		if p.HostAllowed(h) {
			t.Errorf("%s allowed", h)
		}
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{{"api.openai.com", "api.openai.com:443", true}, {"API.openai.com.:8443", "api.openai.com", true}, {"[::1]:1", "::1", true},
		{"", "", false}, {"api.openai.com.evil", "api.openai.com", false}, {"openai.com", "api.openai.com", false}} {
		if SameHost(c.a, c.b) != c.same {
			t.Errorf("SameHost(%q, %q) = %v", c.a, c.b, !c.same)
		}
	}
	r := httptest.NewRequest("GET", "http://attacker.example/v1/models", nil)
	ref := p.CheckHost(r)
	if ref == nil || ref.Status != http.StatusMisdirectedRequest || ref.Code != "host_not_allowed" {
		t.Fatalf("foreign host: %+v", ref)
	}
}

// Every bad entry is reported, each naming its index and the fix.
func TestNewRefusesBadEntries(t *testing.T) {
	t.Parallel()
	_, err := New(Config{
		Hosts:          []string{"ok.example", "", "*", "http://x.example", "x.example:8787", "a.*.example", "x.example/path", "bad host"},
		AllowedOrigins: []string{"https://app.example.com", "*", "null", "app.example.com", "https://app.example.com/path", "https://*.example.com", "ftp://x", "https://u:p@x.example"},
	})
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"hosts[1]", "hosts[2]", "hosts[3]", "hosts[4]", "hosts[5]", "hosts[6]", "hosts[7]",
		"allowedOrigins[1]", "allowedOrigins[2]", "allowedOrigins[3]", "allowedOrigins[4]", "allowedOrigins[5]", "allowedOrigins[6]", "allowedOrigins[7]"} {
		if !strings.Contains(err.Error(), want+":") {
			t.Errorf("%s not reported: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "hosts[0]") || strings.Contains(err.Error(), "allowedOrigins[0]") {
		t.Errorf("a good entry was refused: %v", err)
	}
}

func TestCheckBrowser(t *testing.T) {
	t.Parallel()
	p := policy(t, Config{AllowedOrigins: []string{"https://app.example.com", "http://localhost:3000"}, Section: "listen"})
	cases := []struct {
		name   string
		method string
		header map[string]string
		status int // 0: answered
	}{
		{"sdk json", "POST", map[string]string{"Content-Type": "application/json"}, 0},
		{"sdk multipart upload", "POST", map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, 0},
		{"no body type", "POST", nil, 0},
		{"same origin", "POST", map[string]string{"Origin": "http://127.0.0.1:8787", "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}, 0},
		{"opted-in origin", "POST", map[string]string{"Origin": "https://app.example.com", "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, 0},
		{"opted-in origin with default port", "POST", map[string]string{"Origin": "https://APP.example.com:443"}, 0},
		{"opted-in same-site origin", "GET", map[string]string{"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"}, 0},
		{"user navigation", "GET", map[string]string{"Sec-Fetch-Site": "none"}, 0},
		{"cross-site origin", "POST", map[string]string{"Origin": "https://evil.example", "Content-Type": "application/json"}, 403},
		{"null origin", "POST", map[string]string{"Origin": "null"}, 403},
		{"same host other port", "POST", map[string]string{"Origin": "http://127.0.0.1:9999"}, 403},
		{"cross-site fetch without origin", "GET", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"same-site without opt-in", "GET", map[string]string{"Sec-Fetch-Site": "Same-Site"}, 403},
		{"unknown Sec-Fetch-Site value", "GET", map[string]string{"Sec-Fetch-Site": "something-new"}, 403},
		{"text/plain", "POST", map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, 415},
		{"form", "POST", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"text/plain unparsable", "POST", map[string]string{"Content-Type": "Text/Plain; ="}, 415},
		{"text/plain from an opted-in origin", "POST", map[string]string{"Origin": "https://app.example.com", "Content-Type": "text/plain"}, 415},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, "http://127.0.0.1:8787/v1/chat/completions", nil)
		for k, v := range c.header {
			r.Header.Set(k, v)
		}
		ref := p.CheckBrowser(r)
		switch {
		case c.status == 0 && ref != nil:
			t.Errorf("%s: refused %+v", c.name, ref)
		case c.status != 0 && (ref == nil || ref.Status != c.status):
			t.Errorf("%s: %+v, want %d", c.name, ref, c.status)
		case ref != nil && ref.Status == 403 && !strings.Contains(ref.Message, "listen.allowedOrigins"):
			t.Errorf("%s: the message does not say how to opt in: %s", c.name, ref.Message)
		}
	}
}

func TestPreflight(t *testing.T) {
	t.Parallel()
	p := policy(t, Config{AllowedOrigins: []string{"https://app.example.com"}})
	preflight := func(h map[string]string) (*httptest.ResponseRecorder, *Refusal) {
		r := httptest.NewRequest("OPTIONS", "http://127.0.0.1:8787/v1/chat/completions", nil)
		for k, v := range h {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		return w, p.Preflight(w, r)
	}
	w, ref := preflight(map[string]string{"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Content-Type, Authorization, X-Stainless-Os, bad header"})
	if ref != nil || w.Code != http.StatusNoContent || w.Header().Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		w.Header().Get("Access-Control-Allow-Headers") != "authorization, content-type, x-stainless-os" || w.Header().Get("Access-Control-Allow-Credentials") != "" {
		t.Fatalf("opted-in preflight: %+v %d %v", ref, w.Code, w.Header())
	}
	if _, ref = preflight(map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}); ref == nil || ref.Status != 403 {
		t.Fatalf("foreign preflight: %+v", ref)
	}
	if w, ref = preflight(nil); ref == nil || ref.Status != 405 || len(w.Header()) != 0 {
		t.Fatalf("bare OPTIONS: %+v", ref)
	}
}

func TestAllowAndDropCORS(t *testing.T) {
	t.Parallel()
	p := policy(t, Config{AllowedOrigins: []string{"https://app.example.com"}})
	r := httptest.NewRequest("POST", "http://127.0.0.1:8787/v1/chat/completions", nil)
	h := http.Header{}
	p.Allow(h, r)
	if len(h) != 0 {
		t.Fatalf("CORS headers without an Origin: %v", h)
	}
	r.Header.Set("Origin", "https://app.example.com")
	p.Allow(h, r)
	if h.Get("Access-Control-Allow-Origin") != "https://app.example.com" || h.Get("Vary") != "Origin" {
		t.Fatalf("opted-in: %v", h)
	}
	up := http.Header{"Access-Control-Allow-Origin": {"*"}, "access-control-allow-credentials": {"true"}, "Access_Control_Expose_Headers": {"x"}, "Content-Type": {"application/json"}}
	DropCORS(up)
	if len(up) != 1 || up.Get("Content-Type") == "" {
		t.Fatalf("left %v", up)
	}
}

// Any Host the policy answers is loopback or listed; any Origin it lets through is the listener's
// own or opted in; nothing panics.
func FuzzGuard(f *testing.F) {
	for _, s := range []string{"localhost:8787", "gateway.internal", "a.svc.cluster.local", "10.0.0.5:1", "[::1]:1", "evil.example",
		"https://app.example.com", "http://127.0.0.1:8787", "null", "HTTPS://APP.EXAMPLE.COM:443", "http://[::1]:8787", "%zz", ""} {
		f.Add(s, s)
	}
	f.Add("[::ffff:10.0.0.5]:1", "https://app.example.com/")
	p, err := New(Config{Hosts: []string{"gateway.internal", "*.svc.cluster.local", "10.0.0.5"}, AllowedOrigins: []string{"https://app.example.com"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, host, origin string) {
		if p.HostAllowed(host) {
			h := hostOf(host)
			a, err := netip.ParseAddr(h)
			listedAddr := err == nil && a.Unmap().WithZone("") == netip.MustParseAddr("10.0.0.5")
			if !LoopbackHost(host) && h != "gateway.internal" && !strings.HasSuffix(h, ".svc.cluster.local") && !listedAddr {
				t.Fatalf("Host %q answered", host)
			}
		}
		r := httptest.NewRequest("POST", "http://127.0.0.1:8787/v1/chat/completions", nil)
		r.Host = "127.0.0.1:8787"
		r.Header.Set("Origin", origin)
		if origin != "" && p.CheckBrowser(r) == nil {
			canon, err := ParseOrigin(origin)
			if err != nil || (canon != "https://app.example.com" && !strings.HasSuffix(canon, "://127.0.0.1:8787")) {
				t.Fatalf("Origin %q let through", origin)
			}
		}
		_ = p.Preflight(httptest.NewRecorder(), r)
	})
}

// Addresses are compared as addresses: IPv4 inside IPv6, zones and spellings aside.
func TestHostAddresses(t *testing.T) {
	t.Parallel()
	p := policy(t, Config{Hosts: []string{"10.0.0.5", "FD00::0:1"}})
	for _, h := range []string{"[::ffff:10.0.0.5]:8787", "[fd00::1]", "[::ffff:127.0.0.1]:1"} {
		if !p.HostAllowed(h) {
			t.Errorf("%s refused", h)
		}
	}
	for _, h := range []string{"10.0.0.50", "[fd00::2]", "010.0.0.5"} {
		if p.HostAllowed(h) {
			t.Errorf("%s allowed", h)
		}
	}
}
