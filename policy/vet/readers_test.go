package vet

import (
	"strings"
	"testing"

	wurl "github.com/nlnwa/whatwg-url/url"
)

// The hosts rule against the readers that act on a URL: a value passes only where net/url (an HTTP
// client in Go; Python's urllib splits the authority the same way for these forms) and the WHATWG
// URL parser (a browser) read the same scheme and host, without user info.

// browserHost is the normalised host a browser opens for a value of a hosts rule, and whether it
// carries user info; ok is false when the browser opens nothing.
func browserHost(s string) (host string, userInfo, ok bool) {
	if _, schemeless, err := ParseURL(s); err == nil && schemeless {
		if !strings.HasPrefix(s, "//") {
			s = "//" + s
		}
		s = "https:" + s
	}
	u, err := wurl.Parse(s)
	if err != nil {
		return "", false, false
	}
	h, err := NormHost(u.Hostname())
	return h, u.Username() != "" || u.Password() != "", err == nil
}

// checkBrowserAgrees fails when the hosts rule (list) passes a value a browser opens elsewhere.
func checkBrowserAgrees(t *testing.T, list []string, s string) {
	t.Helper()
	c, _ := compileCheck(Check{Hosts: list}, "", func(string, string, ...any) {})
	pass, _, _ := c.checkURL(s)
	if !pass {
		return
	}
	h, userInfo, ok := browserHost(s)
	if !ok || userInfo || !c.hosts.Match(h) {
		t.Errorf("hosts %v pass %q; a browser opens host %q (user info %v, ok %v)", list, s, h, userInfo, ok)
	}
}

var readerURLs = []struct {
	url, why string // why: "" when the rule passes it
}{
	{"https://acme.com/x", ""},
	{"acme.com/x", ""},
	{"https://ACME.com./x", ""},
	{"https://2130706433/", "readers disagree"},
	{"http://0x7f.1/", "readers disagree"},
	{"https://acme.com\\@evil.net/", "is not a valid url"},
	{"https://acme.com%2F@evil.net/", "has user info"},
	{"https://acme.com|@evil.net/", "is not a valid url"},
	{"https://evil.net#@acme.com", "has a host that is not allowed"},
	{"https://ev%69l.net/", "is not a valid url"},
	{"https://xn--e1afmkfd.xn--p1ai/", "has a host that is not allowed"},
	{"javascript://acme.com/%0aalert(1)", "has a scheme that is not allowed"},
}

// TestHostsRuleReadersAgree: the table, and the property on each entry.
func TestHostsRuleReadersAgree(t *testing.T) {
	t.Parallel()
	list := []string{"acme.com", "2130706433", "0x7f.1"}
	c, _ := compileCheck(Check{Hosts: list}, "", func(string, string, ...any) {})
	for _, tc := range readerURLs {
		_, why, _ := c.checkURL(tc.url)
		if !strings.Contains(why, tc.why) || (tc.why == "") != (why == "") {
			t.Errorf("%q: %q, want %q", tc.url, why, tc.why)
		}
		checkBrowserAgrees(t, list, tc.url)
	}
}

// FuzzHostsRuleReaders: for any value, a hosts rule that lists the host net/url reads passes it
// only when a browser opens that host too. Seeds: testdata/fuzz/FuzzHostsRuleReaders.
func FuzzHostsRuleReaders(f *testing.F) {
	for _, tc := range readerURLs {
		f.Add(tc.url)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, _, err := ParseURL(s)
		if err != nil {
			return
		}
		h, err := NormHost(u.Hostname())
		if err != nil || strings.Contains(h, "*") {
			return
		}
		checkBrowserAgrees(t, []string{h}, s)
	})
}
