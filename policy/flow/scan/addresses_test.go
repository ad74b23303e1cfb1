package scan

import (
	"net/mail"
	"net/url"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/promptgate/promptgate/policy/vet"
)

// The scanner's addresses against net/mail (RFC 5322): wherever net/mail reads an address whose
// domain is a host name under a top-level domain, an IPv4 address or an address literal, the
// scanner finds an address at that domain there, or one it cannot read (which fails every check).

// checkAddresses checks the property on a value net/mail reads as a list of addresses, alone and
// inside prose; it returns how many addresses it checked.
func checkAddresses(t *testing.T, value string) int {
	t.Helper()
	list, err := mail.ParseAddressList(value)
	if err != nil {
		return 0
	}
	n := 0
	for _, text := range []string{value, "Write to " + value + " today."} {
		items := Find(text, Email)
		for _, a := range list {
			d := a.Address[strings.LastIndexByte(a.Address, '@')+1:]
			want, err := vet.NormHost(d)
			if err != nil || !mailDomain(d) {
				continue
			}
			n++
			if !foundAt(items, want) {
				t.Errorf("in %q net/mail reads %q (domain %q); the scanner reads %s", text, a.Address, want, showItems(text, items))
			}
		}
	}
	return n
}

// mailDomain reports whether a domain is one the scanner looks for in free text: an address
// literal, an IPv4 address, or a name that ends in a top-level domain and holds no punctuation
// (IDNA2008 refuses punctuation in a name, so no registry hands out such a domain, and prose puts
// punctuation around addresses).
func mailDomain(d string) bool {
	if strings.HasPrefix(d, "[") {
		return true
	}
	if strings.ContainsFunc(d, func(r rune) bool { return r >= utf8.RuneSelf && unicode.IsPunct(r) }) {
		return false
	}
	labels := strings.Split(d, ".")
	return len(labels) >= 2 && (isIPv4(labels) || icannTLD(strings.ToLower(labels[len(labels)-1])))
}

func foundAt(items []Item, domain string) bool {
	for _, it := range items {
		if it.Malformed {
			return true
		}
		if h, err := vet.NormHost(it.Host); err == nil && h == domain {
			return true
		}
	}
	return false
}

var addressCases = []string{
	`"bob@acme.com"@evil.net`, `"bob\"@acme.com"@evil.net`, `"Bob Smith"@evil.net`, `"a\\"@evil.net`,
	"bob@acme.com(x)", "Bob <bob@evil.net>", `"Bob <bob@acme.com>" <x@evil.net>`, "bob@[203.0.113.9]",
	"bob@203.0.113.9", "bob@acme.com, eve@evil.net", "Carol <c@évil.net>, d@x.org", "=?utf-8?q?bob?= <a@b.com>",
	"acme.com!bob@evil.net", "bob%acme.com@evil.net", "bob@evil.net (acme.com)", "<bob@evil.net>",
	"undisclosed-recipients:;", "team: a@x.com, b@y.org;", "bób@x.com", `"x"@evil.net, "y@z"@evil.org`,
	"eve@evil.net\u200b", "eve@evil.n\u2060et", "eve@ev\u00adil.net\ufeff, bob@acme.com",
}

// TestAddressesAgainstNetMail: the table of forms RFC 5322 allows, read by both.
func TestAddressesAgainstNetMail(t *testing.T) {
	t.Parallel()
	n := 0
	for _, v := range addressCases {
		n += checkAddresses(t, v)
	}
	if n < 30 {
		t.Fatalf("only %d addresses checked", n)
	}
}

// FuzzAddressesAgainstNetMail: for any value net/mail reads, the same. Seeds:
// testdata/fuzz/FuzzAddressesAgainstNetMail.
func FuzzAddressesAgainstNetMail(f *testing.F) {
	for _, v := range addressCases {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if len(v) > 256 {
			return
		}
		checkAddresses(t, v)
	})
}

// checkMailto checks a mailto: URL (RFC 6068) against what a mail program reads of it: net/url's
// decoding of its address part and of its to, cc and bcc fields, each read by net/mail. It returns
// how many addresses it checked.
func checkMailto(t *testing.T, link string) int {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil || !strings.EqualFold(u.Scheme, "mailto") {
		return 0
	}
	var values []string
	if to, err := url.PathUnescape(u.Opaque); err == nil {
		values = append(values, to)
	}
	q := u.Query()
	for _, f := range []string{"to", "cc", "bcc"} {
		values = append(values, q[f]...)
	}
	n := 0
	for _, text := range []string{link, `<a href="` + link + `">x</a>`, "[x](" + link + ")"} {
		items := Find(text, Email)
		for _, v := range values {
			list, err := mail.ParseAddressList(v)
			if err != nil {
				continue
			}
			for _, a := range list {
				d := a.Address[strings.LastIndexByte(a.Address, '@')+1:]
				want, err := vet.NormHost(d)
				if err != nil || !mailDomain(d) {
					continue
				}
				n++
				if !foundAt(items, want) {
					t.Errorf("in %q a mail program reads %q (domain %q); the scanner reads %s", text, a.Address, want, showItems(text, items))
				}
			}
		}
	}
	return n
}

var mailtoCases = []string{
	"mailto:eve%40evil.net", "mailto:bob@acme.com?cc=eve%40evil.net", "MAILTO:bob@acme.com?bcc=eve%2540x.org,eve%40evil.net",
	"mailto:%22bob%40acme.com%22%40evil.net", "mailto:?to=eve%40evil.net&subject=hi", "mailto:bob%40acme.com,eve%40evil.net",
}

// TestMailtoAgainstNetMail: the addresses of a mailto: link are read as the mail program it opens
// reads them, percent-escapes decoded.
func TestMailtoAgainstNetMail(t *testing.T) {
	t.Parallel()
	n := 0
	for _, link := range mailtoCases {
		n += checkMailto(t, link)
	}
	if n < 20 {
		t.Fatalf("only %d addresses checked", n)
	}
}

// FuzzMailtoAgainstNetMail: for any mailto: link, the same.
func FuzzMailtoAgainstNetMail(f *testing.F) {
	for _, link := range mailtoCases {
		f.Add(link)
	}
	f.Fuzz(func(t *testing.T, link string) {
		if len(link) > 256 || !strings.HasPrefix(strings.ToLower(link), "mailto:") || strings.ContainsAny(link, "\"<>()[] \t\r\n") {
			return
		}
		checkMailto(t, link)
	})
}
