package scan

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	wurl "github.com/nlnwa/whatwg-url/url"
)

// show renders an item as "kind:text" plus its parts, for the tables.
func show(text string, it Item) string {
	s := showParts(it.Text(text), it)
	if it.Decoded != "" {
		s += " from=" + text[it.Start:it.End]
	}
	return s
}

func showParts(w string, it Item) string {
	switch it.Kind {
	case URL:
		s := fmt.Sprintf("url:%s host=%s", w, it.Host)
		if it.Scheme != "" {
			s += " scheme=" + it.Scheme
		}
		if it.UserInfo {
			s += " userinfo"
		}
		if it.Malformed {
			s += " malformed"
		}
		for _, r := range it.Alt {
			s += " alt=" + showReading(r)
		}
		return s
	case Email:
		s := fmt.Sprintf("email:%s domain=%s", w, it.Host)
		if it.Malformed {
			s += " malformed"
		}
		return s
	}
	return fmt.Sprintf("iban:%s value=%s", w, it.Value)
}

// showReading renders a reading: "evil.net+userinfo", "!unreadable", "(none)".
func showReading(r Reading) string {
	switch {
	case r.Unreadable:
		return "!unreadable"
	case r.Host == "":
		return "(none)"
	case r.UserInfo:
		return r.Host + "+userinfo"
	}
	return r.Host
}

// scanCases are the table of Find, shared with the fuzz seeds.
var scanCases = []struct {
	text string
	want []string
}{
	{"", nil},
	{"no links here, just words. e.g. this; version 1.2.3", nil},
	{"notes.txt and main.js and v1.2", nil},
	// URLs with a scheme
	{"see https://x.com", []string{"url:https://x.com host=x.com scheme=https"}},
	{"(see https://en.wikipedia.org/wiki/Go_(language)).", []string{"url:https://en.wikipedia.org/wiki/Go_(language) host=en.wikipedia.org scheme=https"}},
	{"go to https://x.com/login.", []string{"url:https://x.com/login host=x.com scheme=https"}},
	{"[click](https://evil.net/a?b=c)", []string{"url:https://evil.net/a?b=c host=evil.net scheme=https"}},
	{"HTTPS://X.COM:8443/a", []string{"url:HTTPS://X.COM:8443/a host=x.com scheme=https"}},
	{"https://bank.com@evil.net/pay", []string{"url:https://bank.com@evil.net/pay host=evil.net scheme=https userinfo", "email:bank.com@evil.net domain=evil.net"}},
	{"https:evil.net/x", []string{"url:https:evil.net/x host=evil.net scheme=https"}},
	{`https:\\evil.net\x`, []string{`url:https:\\evil.net\x host=evil.net scheme=https`}},
	{"https:///evil.net/x", []string{"url:https:///evil.net/x host=evil.net scheme=https"}},
	{"ftp://files.example.org/a", []string{"url:ftp://files.example.org/a host=files.example.org scheme=ftp"}},
	{"file:///etc/passwd", []string{"url:file:///etc/passwd host= scheme=file"}},
	{"http://[::1]:8080/x", []string{"url:http://[::1]:8080/x host=[::1] scheme=http"}},
	{"https://xn--bcher-kva.de/ and https://bücher.de/", []string{
		"url:https://xn--bcher-kva.de/ host=xn--bcher-kva.de scheme=https", "url:https://bücher.de/ host=xn--bcher-kva.de scheme=https"}},
	{"https://ok.com/r?u=https://evil.net/x", []string{
		"url:https://ok.com/r?u=https://evil.net/x host=ok.com scheme=https", "url:https://evil.net/x host=evil.net scheme=https"}},
	{"mailto:bob@x.com and note: this", []string{"email:bob@x.com domain=x.com"}},
	{"javascript:alert(1)", []string{"url:javascript:alert(1) host= scheme=javascript"}},
	// without a scheme
	{"www.x.com/login", []string{"url:www.x.com/login host=www.x.com"}},
	{"visit x.com/path?q=1, then y.org.", []string{"url:x.com/path?q=1 host=x.com", "url:y.org host=y.org"}},
	{"www.intranet/login", []string{"url:www.intranet/login host=www.intranet"}},
	{"evilx.com and x.com.evil.net", []string{"url:evilx.com host=evilx.com", "url:x.com.evil.net host=x.com.evil.net"}},
	{"10.0.0.1/admin", []string{"url:10.0.0.1/admin host=10.0.0.1"}},
	{"read readme.md", []string{"url:readme.md host=readme.md"}},
	{"//evil.net/x", []string{"url:evil.net/x host=evil.net"}},
	{"x.com:8080/a", []string{"url:x.com:8080/a host=x.com"}},
	{"пример.рф", []string{"url:пример.рф host=xn--e1afmkfd.xn--p1ai"}},
	{"evil。com", []string{"url:evil。com host=evil.com"}},
	{"evil\u200b.com", []string{"url:evil\u200b.com host=evil.com"}},
	{"请访问evil.com立即", []string{"url:请访问evil.com host=xn--evil-pr9lpki90d.com"}},
	{"EXAMPLE.COM.", []string{"url:EXAMPLE.COM host=example.com"}},
	{"a.b.c", nil},
	// emails
	{"write to bob@x.com.", []string{"email:bob@x.com domain=x.com"}},
	{"bob@x.com.evil.net", []string{"email:bob@x.com.evil.net domain=x.com.evil.net"}},
	{"<Bob.Smith+tag@Mail.Example.co.uk>", []string{"email:Bob.Smith+tag@Mail.Example.co.uk domain=Mail.Example.co.uk"}},
	{"bob@localhost, a@b.c, @x.com, x@.com", nil},
	{"ops@corp.internal", []string{"email:ops@corp.internal domain=corp.internal"}},
	{"a@b@c.com", []string{"email:b@c.com domain=c.com"}},
	{"visit ok.com@evil.net/login.", []string{"email:ok.com@evil.net domain=evil.net", "url:ok.com@evil.net/login host=evil.net userinfo"}},
	// IBANs
	{"pay DE89 3704 0044 0532 0130 00 today", []string{"iban:DE89 3704 0044 0532 0130 00 value=DE89370400440532013000"}},
	{"IBAN:DE89370400440532013000.", []string{"iban:DE89370400440532013000 value=DE89370400440532013000"}},
	{"gb82 west 1234 5698 7654 32", []string{"iban:gb82 west 1234 5698 7654 32 value=GB82WEST12345698765432"}},
	{"FR14-2004-1010-0505-0001-3M02-606", []string{"iban:FR14-2004-1010-0505-0001-3M02-606 value=FR1420041010050500013M02606"}},
	{"DE89 3704 0044 0532 0130 01", nil},
	{"DE89370400440532013000123", nil},
	{"XDE89370400440532013000", nil},
	{"DE89 3704 0044 0532 0130 00 1234", []string{"iban:DE89 3704 0044 0532 0130 00 value=DE89370400440532013000"}},
	// IBANs as people write them: runs of white space, a line break, the country code apart,
	// invisible and full-width characters
	{"GB82  WEST  1234  5698  7654  32", []string{"iban:GB82  WEST  1234  5698  7654  32 value=GB82WEST12345698765432"}},
	{"account: GB 82 WEST 1234 5698 7654 32.", []string{"iban:GB 82 WEST 1234 5698 7654 32 value=GB82WEST12345698765432"}},
	{"GB82\nWEST12345698765432", []string{"iban:GB82\nWEST12345698765432 value=GB82WEST12345698765432"}},
	{"GB82\r\n  WEST 1234\t5698 - 7654 32", []string{"iban:GB82\r\n  WEST 1234\t5698 - 7654 32 value=GB82WEST12345698765432"}},
	{"GB82WEST1234\u200b5698765432", []string{"iban:GB82WEST1234\u200b5698765432 value=GB82WEST12345698765432"}},
	{"GB\u200b82\ufeffWEST12345698765432", []string{"iban:GB\u200b82\ufeffWEST12345698765432 value=GB82WEST12345698765432"}},
	{"ＧＢ８２ＷＥＳＴ１２３４５６９８７６５４３２", []string{"iban:ＧＢ８２ＷＥＳＴ１２３４５６９８７６５４３２ value=GB82WEST12345698765432"}},
	{"ｇｂ８２　ｗｅｓｔ　１２３４　５６９８　７６５４　３２", []string{"iban:ｇｂ８２　ｗｅｓｔ　１２３４　５６９８　７６５４　３２ value=GB82WEST12345698765432"}},
	{"𝐆𝐁𝟖𝟐𝐖𝐄𝐒𝐓𝟏𝟐𝟑𝟒𝟓𝟔𝟗𝟖𝟕𝟔𝟓𝟒𝟑𝟐", []string{"iban:𝐆𝐁𝟖𝟐𝐖𝐄𝐒𝐓𝟏𝟐𝟑𝟒𝟓𝟔𝟗𝟖𝟕𝟔𝟓𝟒𝟑𝟐 value=GB82WEST12345698765432"}},
	{"GB82 WEST 1234 5698 7654 32\n2024 report", []string{"iban:GB82 WEST 1234 5698 7654 32 value=GB82WEST12345698765432"}},
	// IBANs with combining marks on their characters (the item covers the marks written) and with
	// the country code and check digits spaced out
	{"DE89\u0301 3704 0044 0532 0130 00", []string{"iban:DE89\u0301 3704 0044 0532 0130 00 value=DE89370400440532013000"}},
	{"D\u0308E89 3704 0044 0532 0130 00\u20dd.", []string{"iban:D\u0308E89 3704 0044 0532 0130 00\u20dd value=DE89370400440532013000"}},
	{"DE8\u03019\u0300\u200b3704 0044 0532 0130 00", []string{"iban:DE8\u03019\u0300\u200b3704 0044 0532 0130 00 value=DE89370400440532013000"}},
	{"pay \u0301DE89 \u0301 3704 0044 0532 0130 00", []string{"iban:DE89 \u0301 3704 0044 0532 0130 00 value=DE89370400440532013000"}},
	{"pay D E89 3704 0044 0532 0130 00", []string{"iban:D E89 3704 0044 0532 0130 00 value=DE89370400440532013000"}},
	{"D E 8 9 3704 0044 0532 0130 00", []string{"iban:D E 8 9 3704 0044 0532 0130 00 value=DE89370400440532013000"}},
	{"D-E-8-9-3-7-0-4-0-0-4-4-0-5-3-2-0-1-3-0-0-0", []string{"iban:D-E-8-9-3-7-0-4-0-0-4-4-0-5-3-2-0-1-3-0-0-0 value=DE89370400440532013000"}},
	{"DE8 9 3704 0044 0532 0130 00", []string{"iban:DE8 9 3704 0044 0532 0130 00 value=DE89370400440532013000"}},
	{"D\u0301 E\u0301 8 9\u0301 3704 0044 0532 0130 00", []string{"iban:D\u0301 E\u0301 8 9\u0301 3704 0044 0532 0130 00 value=DE89370400440532013000"}},
	{"DË89 3704 0044 0532 0130 00", []string{"iban:DË89 3704 0044 0532 0130 00 value=DE89370400440532013000"}},
	{"ǴB82 WEST 1234 5698 7654 32", []string{"iban:ǴB82 WEST 1234 5698 7654 32 value=GB82WEST12345698765432"}},
	// ... and their bad forms
	{"DE89\u0301 3704 0044 0532 0130 01", nil},
	{"cafe\u0301DE89 3704 0044 0532 0130 00", nil},
	{"caféDE89 3704 0044 0532 0130 00", nil},
	{"DE89\u0301x 3704 0044 0532 0130 00", nil},
	{"DE89 3704 0044 0532 0130 00\u0301A", nil},
	{"D E 8 9 3704 0044 0532 0130 01", nil},
	{"D E893704 0044 0532 0130 00", nil},
	{"Z Z 1 8 1234 5678 9012 34", nil},
	{"a b 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8", nil},
	// ... and what stays ordinary text
	{"GB82 WEST 1234 5698 7654 32A", nil},
	{"GB82 -- WEST 1234 5698 7654 32", nil},
	{"GB8 2WEST12345698765432", nil},
	{"GB 8 2WEST12345698765432", nil},
	{"ZZ1812345678901234", []string{"iban:ZZ1812345678901234 value=ZZ1812345678901234"}},
	{"ZZ 18 1234 5678 9012 34", nil}, // the same, an unknown country written apart
	{"it 12 34 56 78 90 12 34 56 78 90 12", nil},
	{"Call me at 12 34 56 78 or at 98 76 54 32 in the morning", nil},
	{"The codes are AB12\nCD34 and EF56\n\nGH78 9012 3456 7890", nil},
	{"ÉGB82WEST12345698765432", nil},
	{"NL91ABNA0417164300 and CH9300762011623852957", []string{
		"iban:NL91ABNA0417164300 value=NL91ABNA0417164300", "iban:CH9300762011623852957 value=CH9300762011623852957"}},
}

func TestFind(t *testing.T) {
	t.Parallel()
	for _, tc := range scanCases {
		var got []string
		for _, it := range Find(tc.text, All) {
			got = append(got, show(tc.text, it))
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("Find(%q):\n got %q\nwant %q", tc.text, got, tc.want)
		}
	}
}

// TestFindLongAuthority: an authority too long to read is reported malformed, not cut to a harmless
// host.
// TestFindAsBrowsersRead: a link written for a browser, with character references or with tabs and
// line breaks inside an attribute value, is found as the browser reads it, beside what is written.
func TestFindAsBrowsersRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		text string
		want []string
	}{
		{"<a href=\"https://acme.com\n.evil\n.net/login\">Reset your password</a>", []string{
			"url:https://acme.com host=acme.com scheme=https",
			"url:https://acme.com.evil.net/login host=acme.com.evil.net scheme=https from=https://acme.com\n.evil\n.net/login"}},
		{"<a href='https://acme.com\t.evil\r\n.net/login'>Reset</a>", []string{
			"url:https://acme.com host=acme.com scheme=https alt=acme.com.evil",
			"url:https://acme.com.evil.net/login host=acme.com.evil.net scheme=https from=https://acme.com\t.evil\r\n.net/login"}},
		{"<A HREF = \"https://acme.com\n.evil.net\">x</A>", []string{
			"url:https://acme.com host=acme.com scheme=https",
			"url:https://acme.com.evil.net host=acme.com.evil.net scheme=https from=https://acme.com\n.evil.net",
			"url:evil.net host=evil.net"}},
		{`<a href="&#x68;&#x74;&#x74;&#x70;&#x73;&#x3a;&#x2f;&#x2f;&#x65;&#x76;&#x69;&#x6c;&#x2e;&#x6e;&#x65;&#x74;/login">Reset</a>`, []string{
			"url:https://evil.net/login host=evil.net scheme=https from=&#x68;&#x74;&#x74;&#x70;&#x73;&#x3a;&#x2f;&#x2f;&#x65;&#x76;&#x69;&#x6c;&#x2e;&#x6e;&#x65;&#x74;/login"}},
		{`<a href="https://acme.com&#10;.evil.net">x</a>`, []string{
			"url:https://acme.com&#10;.evil.net host=acme.com& scheme=https",
			"url:https://acme.com.evil.net host=acme.com.evil.net scheme=https from=https://acme.com&#10;.evil.net"}},
		{"write to bob&#64;evil.net", []string{"email:bob@evil.net domain=evil.net from=bob&#64;evil.net", "url:evil.net host=evil.net"}},
		{"https:&sol;&sol;evil&period;net", []string{
			"url:https:&sol;&sol;evil&period;net host=&sol;&sol;evil&period;net scheme=https",
			"url:https://evil.net host=evil.net scheme=https from=https:&sol;&sol;evil&period;net"}},
		{"&lt;https://evil.net&gt;", []string{
			"url:https://evil.net host=evil.net scheme=https",
			"url:https://evil.net&gt host=evil.net&gt scheme=https"}},
		{`<a href="https://acme.com/a?x=1&amp;y=2">`, []string{
			"url:https://acme.com/a?x=1&amp;y=2 host=acme.com scheme=https",
			"url:https://acme.com/a?x=1&y=2 host=acme.com scheme=https from=https://acme.com/a?x=1&amp;y=2"}},
		// Line breaks outside an attribute value, or in text that is not a tag, stay.
		{"<p>see https://acme.com\nThanks</p>", []string{"url:https://acme.com host=acme.com scheme=https"}},
		{"if a < b then x=\"https://acme.com\nThanks\"", []string{"url:https://acme.com host=acme.com scheme=https"}},
		{"<a title=\"x\">https://acme.com\nThanks</a>", []string{"url:https://acme.com host=acme.com scheme=https"}},
		{"AT&T and R&D, &unknown; and & alone: https://acme.com", []string{"url:https://acme.com host=acme.com scheme=https"}},
	} {
		var got []string
		for _, it := range Find(tc.text, All) {
			got = append(got, show(tc.text, it))
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Find(%q):\n got  %q\n want %q", tc.text, got, tc.want)
		}
	}
}

func TestFindLongAuthority(t *testing.T) {
	t.Parallel()
	text := "https://" + strings.Repeat("a.", 600) + "@evil.net/"
	var url *Item
	for _, it := range Find(text, URL) {
		url = &it
	}
	if url == nil || !url.Malformed || strings.Contains(url.Host, "evil") {
		t.Fatalf("got %+v", url)
	}
	if it := Find("https://"+strings.Repeat("a", 1000)+"@evil.net/", URL); len(it) != 1 || it[0].Malformed || it[0].Host != "evil.net" {
		t.Fatalf("an authority within the bound: %+v", it)
	}
}

func TestFindKinds(t *testing.T) {
	t.Parallel()
	text := "bob@x.com https://y.org DE89 3704 0044 0532 0130 00"
	for _, tc := range []struct {
		k    Kind
		want int
	}{{URL, 1}, {Email, 1}, {IBAN, 1}, {URL | Email, 2}, {All, 3}, {0, 0}} {
		if got := Find(text, tc.k); len(got) != tc.want {
			t.Errorf("kinds %b: %d items, want %d", tc.k, len(got), tc.want)
		}
		for _, it := range Find(text, tc.k) {
			if it.Kind&tc.k == 0 {
				t.Errorf("kinds %b: found a %b", tc.k, it.Kind)
			}
		}
	}
}

func TestWhole(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		k    Kind
		want bool
	}{
		{"bob@x.com", Email, true},
		{"bob@x.com ", Email, false},
		{"bob@x.com.", Email, false},
		{"see bob@x.com", Email, false},
		{"DE89 3704 0044 0532 0130 00", IBAN, true},
		{"de89370400440532013000", IBAN, true},
		{"DE89370400440532013001", IBAN, false},
		{"https://x.com/a", URL, true},
		{"www.x.com/login", URL, true},
		{"x.com", URL, true},
		{"x.com and more", URL, false},
		{"hello", URL, false},
	} {
		if _, ok := Whole(tc.s, tc.k); ok != tc.want {
			t.Errorf("Whole(%q, %b) = %v, want %v", tc.s, tc.k, ok, tc.want)
		}
	}
}

func TestValidIBAN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"DE89370400440532013000", true},
		{"GB82WEST12345698765432", true},
		{"FR1420041010050500013M02606", true},
		{"NO9386011117947", true},
		{"DE8937040044053201300", false},   // DE is 22 long
		{"DE00370400440532013000", false},  // check digits 00
		{"ZZ11370400440532013000", false},  // unknown country: checksum alone, which fails
		{"de89370400440532013000", false},  // upper case only
		{"DE89 370400440532013000", false}, // no separators
		{"DE89", false},
	} {
		if got := ValidIBAN(tc.s); got != tc.want {
			t.Errorf("ValidIBAN(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

// TestFindLinear feeds inputs built to make a careless scanner quadratic; the go test timeout is
// the bound, the benchmark the figure.
func TestFindLinear(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		strings.Repeat("http:", 200000),
		strings.Repeat("a@", 200000),
		strings.Repeat("a.", 200000) + "com",
		strings.Repeat("https://a.com/", 100000) + strings.Repeat(")", 100000),
		strings.Repeat("(", 100000) + "https://a.com/" + strings.Repeat(")", 100000),
		strings.Repeat("AB12 ", 200000),
		strings.Repeat("x", 1<<20),
		strings.Repeat("&#x61;", 200000),
		strings.Repeat("&#", 200000),
		"<a href=\"" + strings.Repeat("\n", 200000),
		"<a href=\"https://" + strings.Repeat("a.\n", 200000),
		strings.Repeat("<a b=\"", 100000),
		strings.Repeat("&amp;", 200000),
		strings.Repeat("GB ", 200000),
		"GB82" + strings.Repeat(" \u200b\n", 200000),
		"G" + strings.Repeat("\u0301", 200000) + "B",
		strings.Repeat("G\u0301 B 8\u200b", 100000),
		strings.Repeat("A B 1 2 ", 100000),
		strings.Repeat("ＡＢ１２ ", 100000),
		strings.Repeat("𝐀𝐁 ", 100000),
		strings.Repeat("http:a\u2022", 100000) + strings.Repeat("!", 100000),
		strings.Repeat(`="http:a"`, 100000),
		strings.Repeat("](http:a ", 100000) + strings.Repeat(" ", 100000),
		strings.Repeat(`"@a.co`, 100000),
		strings.Repeat("www.a..", 100000),
		"https://" + strings.Repeat("a", 1<<20),
	} {
		_ = Find(s, All)
	}
}

// worstCases are texts built to make the readers of links, addresses and IBANs work hard: every
// link read by several readers with user info, addresses with quoted local parts, IBANs grouped
// with marks that fail their checksum, hostless links, and long runs without a stop.
var worstCases = []struct{ name, unit string }{
	{"links", "see https://acme.com|@evil.net/x and <a href=\"https://acme.com @b.net/\">y</a> [z](https://a.com\"@b.net/) "},
	{"ats", `"bob@acme.com"@evil.net a!b@c.co x@[1.2.3.4] `},
	{"ibans", "GB82.WEST.1234.5698.7654.31 GB82/WEST/1234/5698/7654/33 "},
	{"spaced-ibans", "G\u0301 B 8 2 W\u200bE S T 1 2 3 4 5 6 9 8 7\u0301\u0301 6 5 4 3 1 "},
	{"hostless", "javascript:x data:text/html,y about:blank "},
	{"runs", "http:a\u2022http:b|"},
	{"relative", "(//1 href=//x url(//y) "},
}

// BenchmarkFindLinear runs Find on 1 MiB and 10 MiB of each worst case, beside bytes.Count over the
// same text (a linear baseline): the cost per byte must not grow with the size.
func BenchmarkFindLinear(b *testing.B) {
	for _, wc := range worstCases {
		for _, size := range []int{1 << 20, 10 << 20} {
			text := strings.Repeat(wc.unit, size/len(wc.unit)+1)[:size]
			b.Run(fmt.Sprintf("%s/%dMiB/find", wc.name, size>>20), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					_ = Find(text, All)
				}
			})
			b.Run(fmt.Sprintf("%s/%dMiB/count", wc.name, size>>20), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					_ = bytes.Count([]byte(text), []byte("@"))
				}
			})
		}
	}
}

func BenchmarkFind(b *testing.B) {
	text := strings.Repeat("Hello Bob, the invoice for March is attached; pay DE89 3704 0044 0532 0130 00 "+
		"by Friday or see https://billing.example.com/inv?id=77 and write to accounts@example.com. ", 40)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		_ = Find(text, All)
	}
}

func FuzzFind(f *testing.F) {
	for _, tc := range scanCases {
		f.Add(tc.text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		items := Find(text, All)
		asWritten := map[itemKey]bool{}
		for _, it := range find(text, All) {
			asWritten[it.key(text)] = true
		}
		for i, it := range items {
			if it.Start < 0 || it.End > len(text) || it.Start >= it.End {
				t.Fatalf("item %d out of range: %+v (len %d)", i, it, len(text))
			}
			if i > 0 && less(it, items[i-1]) {
				t.Fatalf("items out of order at %d", i)
			}
			if !utf8.ValidString(text[it.Start:it.End]) {
				t.Fatalf("item %q is not valid UTF-8", text[it.Start:it.End])
			}
			w := it.Text(text)
			if it.Decoded == text[it.Start:it.End] {
				t.Fatalf("item %q carries a Decoded equal to its text", w)
			}
			if !asWritten[it.key(text)] {
				// Found only as a browser reads the text: its parts are those of what was read.
				if _, ok := decodedView(text); !ok {
					t.Fatalf("item %+v is not in %q as written, and the text has no other reading", it, text)
				}
				checkParts(t, text, it, w)
				continue
			}
			// An item is a whole token: it does not start in the middle of a word.
			if it.Start > 0 {
				prev, _ := utf8.DecodeLastRuneInString(text[:it.Start])
				switch it.Kind {
				case Email:
					if isLocalRune(prev) && prev != '.' && !it.Malformed {
						t.Fatalf("email %q starts inside a word (after %q) in %q", w, prev, text)
					}
				case IBAN:
					if isAlnumByte(byte(prev)) && prev < utf8.RuneSelf {
						t.Fatalf("iban %q starts inside a word in %q", w, text)
					}
				}
			}
			checkParts(t, text, it, w)
			switch it.Kind {
			case Email:
				if it.End < len(text) {
					next, _ := utf8.DecodeRuneInString(text[it.End:])
					if isHostRune(next) && !isDot(next) && next != '-' && next != '_' {
						t.Fatalf("email %q ends inside a word in %q", w, text)
					}
				}
			case IBAN:
				if it.End < len(text) {
					if next, _ := utf8.DecodeRuneInString(text[it.End:]); next < utf8.RuneSelf && isAlnumByte(byte(next)) {
						t.Fatalf("iban %q ends inside a word in %q", w, text)
					}
				}
			}
			// An item found in a text is found again, whole, when it stands alone.
			if (it.Kind != URL || it.Scheme != "") && !it.Malformed { // an unreadable item depends on its context
				if _, ok := Whole(w, it.Kind); !ok && it.Kind != URL {
					t.Fatalf("%q found in %q is not found alone", w, text)
				}
			}
		}
	})
}

// checkParts checks that an item's host or value is part of w, the item as read.
func checkParts(t *testing.T, text string, it Item, w string) {
	t.Helper()
	switch it.Kind {
	case URL:
		// The item's own reading is the parser's reading of the item as read.
		if it.Malformed || HostlessScheme(it.Scheme) || it.Scheme == "file" {
			return
		}
		prefix := ""
		if it.Scheme == "" {
			prefix = "https://"
		}
		u, err := wurl.Parse(prefix + w)
		switch {
		case err != nil:
			t.Fatalf("url %q (in %q) has host %q, and the parser refuses it: %v", w, text, it.Host, err)
		case u.Hostname() != it.Host:
			t.Fatalf("url %q (in %q) has host %q, the parser reads %q", w, text, it.Host, u.Hostname())
		}
	case Email:
		// It ends in "@" and its domain, white space or a comment between them.
		k := strings.LastIndexByte(w[:max(0, len(w)-len(it.Host))], '@')
		if !strings.HasSuffix(w, it.Host) || k < 0 || skipCFWS(w, k+1) != len(w)-len(it.Host) && k+1 != len(w)-len(it.Host) {
			t.Fatalf("email %q does not end in its domain %q (in %q)", w, it.Host, text)
		}
	case IBAN:
		if !ValidIBAN(it.Value) {
			t.Fatalf("iban %q has an invalid value %q", w, it.Value)
		}
		var compact strings.Builder
		for _, r := range w {
			if c := ibanChar(r); c != 0 {
				compact.WriteByte(c)
			}
		}
		if compact.String() != it.Value {
			t.Fatalf("iban %q has value %q", w, it.Value)
		}
	}
}

// FuzzIBANForms writes valid IBANs as a person may: each character followed by nothing, combining
// marks, an invisible character or a separator, as plan says. An IBAN written so that a bank form
// reads it (separators only between whole groups, the country code and check digits apart from the
// rest when split) is found whole with its value; one split inside its head without a split after
// it is not found.
func FuzzIBANForms(f *testing.F) {
	ibans := []string{"DE89370400440532013000", "GB82WEST12345698765432", "FR1420041010050500013M02606",
		"NL91ABNA0417164300", "CH9300762011623852957"}
	f.Add(uint8(0), []byte{1, 1, 1, 1, 0, 0, 0, 1})
	f.Add(uint8(1), []byte{0, 2, 0, 5, 0, 0, 0, 6, 3})
	f.Add(uint8(0), []byte{0, 0, 1, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, which uint8, plan []byte) {
		value := ibans[int(which)%len(ibans)]
		after := []string{"", " ", "\u0301", "\u200b", "\u0308\u20dd", " - ", "\u00a0", "\n", "<b>", "\u0301 \u0301"}
		var text strings.Builder
		cut := make([]bool, len(value))
		for k := range len(value) {
			text.WriteByte(value[k])
			if k < len(plan) && k < len(value)-1 {
				a := after[int(plan[k])%len(after)]
				text.WriteString(a)
				cut[k+1] = strings.ContainsAny(a, " \u00a0-\n<")
			}
		}
		w := text.String()
		items := Find(w, IBAN)
		switch {
		case (cut[1] || cut[3]) && !cut[4]:
			for _, it := range items {
				if it.Start == 0 && it.End == len(w) {
					t.Fatalf("%q is found whole, split inside its head only", w)
				}
			}
		case len(items) != 1 || items[0].Start != 0 || items[0].End != len(w) || items[0].Value != value:
			t.Fatalf("Find(%q) = %+v, want the IBAN %s over the whole text", w, items, value)
		}
	})
}
