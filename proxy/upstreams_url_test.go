package proxy

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// FuzzJoinMount: the upstream path is the base's path and the listener path less the mount,
// whether or not joinMount takes its shortcut (the listener path itself).
func FuzzJoinMount(f *testing.F) {
	for _, s := range [][3]string{
		{"/v1", "/v1/chat/completions", "/v1"}, {"", "/v1/chat/completions", "/v1"}, {"/v1", "/v2/x", "/v1"},
		{"/v1", "/v1", "/v1"}, {"", "/v1beta/models", ""}, {"/openai/v1", "/v1/x", "/v1"}, {"/v1", "/v1x", "/v1"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, base, p, mount string) {
		if got, want := joinMount(base, p, mount), base+strings.TrimPrefix(p, mount); got != want {
			t.Fatalf("joinMount(%q, %q, %q) = %q, want %q", base, p, mount, got, want)
		}
	})
}

// TestKeySentIsTheMappedURLsOrigin: whether the operator key goes with a request is decided as
// on the URL the request goes to (url), for keys of the upstream's origin and of another, bases
// with and without a path, and listener URLs under the mount and not.
func TestKeySentIsTheMappedURLsOrigin(t *testing.T) {
	other, _ := url.Parse("https://other.example:8443")
	for _, base := range []string{"http://127.0.0.1:9/v1", "https://api.example.com/v1/", "https://API.example.com:443", "http://[::1]:80/x"} {
		b, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, key := range []Key{{}, bindKey(t, "sk-op", b), bindKey(t, "sk-op", other)} {
			ups, err := openUpstreams(map[string]Upstream{"openai": {URL: b, Key: key}})
			if err != nil {
				t.Fatal(err)
			}
			up := ups["openai"]
			for _, in := range []string{"/v1/chat/completions", "/v1/responses?x=1", "/other", "/v1/a%2Fb"} {
				u, err := url.Parse(in)
				if err != nil {
					t.Fatal(err)
				}
				if want := key.sendsTo(up.url(u)); up.keySent != want {
					t.Errorf("base %s, key of %q, %s: keySent %v, sendsTo(url) %v", base, key.Origin, in, up.keySent, want)
				}
			}
		}
	}
}

// TestAnnouncedHeaderKeysAreCanonical: announce sets its headers by key, as Header.Set would only
// where the keys are in canonical form.
func TestAnnouncedHeaderKeysAreCanonical(t *testing.T) {
	for _, k := range []string{HeaderProtocol, HeaderTemplate, HeaderToolsRemoved, HeaderRequestID, HeaderUpstreamReqID} {
		if c := http.CanonicalHeaderKey(k); c != k {
			t.Errorf("%q is not canonical (%q)", k, c)
		}
	}
}
