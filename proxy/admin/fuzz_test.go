package admin

import (
	"net/url"
	"strings"
	"testing"
)

// Whatever the query string, a parameter that the standard parser would read as a credential is caught.
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
