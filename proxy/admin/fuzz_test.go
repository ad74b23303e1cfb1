package admin

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Whatever the query string, a parameter that the standard parser would read as a credential is
// caught.
func FuzzTokenInQuery(f *testing.F) {
	for _, s := range []string{"token=x", "limit=1&Access_Token=x", "api%5Fkey=x", "a=1;key=2", "%zz=1&key=1", "k%65y=v", "tok%65n", "", "&&=&", "API-KEY=1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, _ := url.ParseQuery(raw) // keeps the pairs it could parse
		want := false
		for k := range q {
			for _, p := range queryTokenParams {
				if strings.ToLower(strings.TrimSpace(k)) == p {
					want = true
				}
			}
		}
		if _, got := tokenInQuery(raw); want && !got {
			t.Fatalf("%q: a credential parameter was missed", raw)
		}
	})
}

// Every diff applies to its first text and gives the second.
func FuzzUnifiedDiff(f *testing.F) {
	f.Add("a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm\n", "a\nB\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm\nn")
	f.Add("", "one\n")
	f.Add("one\ntwo\n", "one\n")
	f.Add("x\r\ny", "x\ny\r\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		d := unifiedDiff("a", "b", a, b)
		if (d == "") != (a == b) {
			t.Fatalf("diff %q for %q, %q", d, a, b)
		}
		if d != "" {
			if got := applyDiff(t, a, d); got != b {
				t.Fatalf("patch gives %q, want %q\n%s", got, b, d)
			}
		}
	})
}

// Whatever the Origin, Host and Sec-Fetch-Site, a request passes only when the browser says it is
// from this origin: Sec-Fetch-Site absent, same-origin or none, and no Origin or one whose host is
// the Host header.
func FuzzCrossSite(f *testing.F) {
	for _, s := range [][3]string{
		{"http://127.0.0.1:8788", "127.0.0.1:8788", "same-origin"}, {"http://127.0.0.1:8787", "127.0.0.1:8788", ""},
		{"null", "localhost", ""}, {"", "localhost", "cross-site"}, {"HTTP://LOCALHOST", "localhost", "none"},
		{"http://a@127.0.0.1:8788", "127.0.0.1:8788", ""}, {"http://127.0.0.1:8788/x?y#z", "127.0.0.1:8788", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, origin, host, site string) {
		r := &http.Request{Host: host, Header: http.Header{}}
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if site != "" {
			r.Header.Set("Sec-Fetch-Site", site)
		}
		if crossSite(t, r) != nil {
			return
		}
		// Header values are read as a browser writes them: blanks around a value do not count.
		if s := strings.ToLower(strings.TrimSpace(r.Header.Get("Sec-Fetch-Site"))); s != "" && s != "same-origin" && s != "none" {
			t.Fatalf("Sec-Fetch-Site %q passed", s)
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || host == "" || !strings.EqualFold(withPort(u.Scheme, u.Host), withPort(u.Scheme, host)) {
				t.Fatalf("Origin %q passed for Host %q", o, host)
			}
		}
	})
}

// withPort is hostport with the scheme's default port written out, so that "h" and "h:80" compare
// equal.
func withPort(scheme, hostport string) string {
	if _, _, err := net.SplitHostPort(hostport); err == nil {
		return hostport
	}
	port := "80"
	if strings.EqualFold(scheme, "https") {
		port = "443"
	}
	return net.JoinHostPort(strings.Trim(hostport, "[]"), port)
}
