package origin

import (
	"net/url"
	"testing"
)

func TestNormalForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"https://api.openai.com/v1", "https://api.openai.com:443"},
		{"HTTPS://API.OpenAI.COM./v1", "https://api.openai.com:443"},
		{"https://api.openai.com:443/v1", "https://api.openai.com:443"},
		{"https://api.openai.com:0443", "https://api.openai.com:443"},
		{"https://api.openai.com:/v1", "https://api.openai.com:443"},
		{"http://127.0.0.1/v1", "http://127.0.0.1:80"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"https://[::1]:8443/x", "https://[::1]:8443"},
		{"https://[0:0::1]", "https://[::1]:443"},
		{"https://[2001:DB8::1]", "https://[2001:db8::1]:443"},
		{"http://localhost.:11434/v1", "http://localhost:11434"},
	} {
		u, err := url.Parse(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Of(u)
		if err != nil || string(got) != tc.want {
			t.Errorf("Of(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestDistinctOrigins(t *testing.T) {
	t.Parallel()
	// Scheme, host and port each make another origin.
	o := func(scheme, hp string) Origin {
		t.Helper()
		v, err := New(scheme, hp)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	base := o("https", "api.openai.com")
	for _, other := range []Origin{o("http", "api.openai.com"), o("https", "api.openai.com:8443"), o("https", "api.anthropic.com"), o("https", "openai.com")} {
		if other == base {
			t.Errorf("%q equals %q", other, base)
		}
	}
	if base.Scheme() != "https" || base.HostPort() != "api.openai.com:443" || base.URL("/v1").String() != "https://api.openai.com:443/v1" {
		t.Errorf("parts of %q: %q %q %q", base, base.Scheme(), base.HostPort(), base.URL("/v1"))
	}
	if v6 := o("https", "[::1]:9"); v6.HostPort() != "[::1]:9" {
		t.Errorf("IPv6 host:port %q", v6.HostPort())
	}
}

func TestBadOrigins(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ scheme, hostport string }{
		{"ftp", "example.com"},
		{"", "example.com"},
		{"https", ""},
		{"https", ":443"},
		{"https", "example.com:0"},
		{"https", "example.com:65536"},
		{"https", "example.com:https"},
		{"https", "exa mple.com"},
		{"https", "user@example.com"},
		{"https", "a..b"},
		{"https", "."},
		{"https", "[fe80::1%eth0]:443"},
	} {
		if got, err := New(tc.scheme, tc.hostport); err == nil {
			t.Errorf("New(%q, %q) = %q, want an error", tc.scheme, tc.hostport, got)
		}
	}
	if _, err := Of(nil); err == nil {
		t.Error("Of(nil) gave no error")
	}
}

// FuzzNew: any scheme and host:port (a CONNECT line, a URL's host) either is refused or gives an
// origin in normal form, which New gives back unchanged from its own parts.
func FuzzNew(f *testing.F) {
	for _, seed := range [][2]string{
		{"https", "api.openai.com"}, {"HTTPS", "API.OpenAI.COM.:0443"}, {"http", "127.0.0.1:80"}, {"https", "[::1]:8443"},
		{"https", "[::ffff:127.0.0.1]"}, {"https", "example.com:"}, {"https", "a..b"}, {"ftp", "x"}, {"https", "[fe80::1%eth0]:1"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, scheme, hostport string) {
		o, err := New(scheme, hostport)
		if err != nil {
			return
		}
		again, err := New(o.Scheme(), o.HostPort())
		if err != nil || again != o {
			t.Fatalf("New(%q, %q) = %q, but its parts give %q, %v", scheme, hostport, o, again, err)
		}
		u := o.URL("/v1")
		if back, err := Of(u); err != nil || back != o {
			t.Fatalf("Of(%s) = %q, %v; want %q", u, back, err, o)
		}
	})
}
