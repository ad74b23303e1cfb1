package scan

import (
	"encoding/json"
	"html"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	wurl "github.com/nlnwa/whatwg-url/url"

	"github.com/promptgate/promptgate/policy/vet"
)

// The scanner's link hosts against the WHATWG URL parser (github.com/nlnwa/whatwg-url, which passes
// the web-platform-tests URL suite): for any text, every link a browser-like reader could see there
// either has its host among the scanner's readings of the item at that place, or that item fails
// every hosts check (a reading without a host, with user info, unreadable, or not a host name).

// readerLink is one link as a reader sees it: the text it gives a browser, and where it starts.
type readerLink struct {
	start int
	href  string
}

// browserReaders lists what the readers of a text see: each place where a special scheme starts
// ("http:", "https:", "ws:", "wss:", "ftp:", "file:" in any case, or "www."), ended as each reader
// ends it (a file: link only where a value or destination holds it, GFM only "http://",
// "https://" and "www."). It is written plainly, rune by rune and quadratic, apart from the
// scanner's finders:
//   - a linkifier that stops at any Unicode space, control, quote or angle bracket, trailing
//     punctuation left out;
//   - GFM's extended autolinks: after white space, "*_~(" or at the start; to ASCII white space or
//     "<"; trailing "?!.,:*_~" left out, and ")" while unbalanced;
//   - linkify-it's user info (after a scheme): to ASCII white space, a control or one of "[]()",
//     when it holds "@";
//   - an HTML attribute value or JSON string (after `="`, `='`, `":"`): to the quote, on its line;
//   - a Markdown destination (after "]("): to ")", or to white space followed by a whole title
//     and ")";
//   - an autolink or angle destination (after "<"): to ">".
func browserReaders(text string) []readerLink {
	var out []readerLink
	for p := 0; p < len(text); p++ {
		if prev, _ := utf8.DecodeLastRuneInString(text[:p]); p > 0 && (unicode.IsLetter(prev) || unicode.IsDigit(prev) || unicode.IsMark(prev) || strings.ContainsRune(".:/\\-_@+", prev)) {
			continue // linkifiers start no link inside a word or a path
		}
		rest := strings.ToLower(text[p:])
		www := strings.HasPrefix(rest, "www.") && len(rest) > 4 && isAlnumByte(rest[4]) // GFM: a domain follows
		before := strings.TrimRight(text[:p], " \t\n\f\r")
		valued := strings.HasSuffix(before, `="`) || strings.HasSuffix(before, `='`) || strings.HasSuffix(before, `":"`) ||
			strings.HasSuffix(before, `": "`) || strings.HasSuffix(before, "](") || strings.HasSuffix(text[:p], "<")
		lowerBefore := strings.ToLower(text[:p])
		bare := strings.HasSuffix(text[:p], "=") || strings.HasSuffix(lowerBefore, "url(") || strings.HasSuffix(lowerBefore, "url('") ||
			strings.HasSuffix(lowerBefore, `url("`) || strings.HasSuffix(before, "]:") // href=, url=, url(, a reference definition
		relative := (valued || bare) && len(rest) > 2 && isSlash(rest[0]) && isSlash(rest[1]) // "//host": the page's scheme
		if !www && !relative && !hasSpecialScheme(rest) {
			continue
		}
		prefix := ""
		if www || relative {
			prefix = "https:"
		}
		if www {
			prefix = "https://"
		}
		at := p // where the link's item must start: a relative link's host, after its slashes
		for relative && at < len(text) && isSlash(text[at]) {
			at++
		}
		if at == len(text) || text[at] <= ' ' {
			at = p // no host in the slashes' token: the item is the slashes
		}
		add := func(e int) {
			if e > p {
				out = append(out, readerLink{at, prefix + text[p:e]})
				if u := mdUnescape(text[p:e]); u != text[p:e] {
					out = append(out, readerLink{at, prefix + u}) // a Markdown renderer's reading
				}
			}
		}
		if relative {
			www = false
		}
		if file := strings.HasPrefix(rest, "file:"); !file && !relative { // linkifiers in text; a file: link only in a value
			add(trimPunct(text, p, runTo(text, p, func(r rune) bool {
				return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune("\"'<>`{}|^", r)
			})))
			gfm := www || strings.HasPrefix(rest, "http://") || strings.HasPrefix(rest, "https://")
			if gfm && (p == 0 || strings.IndexByte(" \t\n\f\r*_~(", text[p-1]) >= 0) {
				add(gfmTrim(text[:runTo(text, p, func(r rune) bool { return strings.ContainsRune(" \t\n\f\r<", r) })], p))
			}
			if e := runTo(text, p, func(r rune) bool { return strings.ContainsRune(" \t\n\f\r[]()", r) || r < ' ' || r == 0x7f }); !www && strings.Contains(text[p:e], "@") {
				add(e)
			}
		}
		if relative && bare {
			add(runTo(text, p, func(r rune) bool { return unicode.IsSpace(r) || strings.ContainsRune(`>)"'`, r) }))
		}
		switch {
		case strings.HasSuffix(before, `="`), strings.HasSuffix(before, `='`), strings.HasSuffix(before, `":"`), strings.HasSuffix(before, `": "`):
			q := before[len(before)-1]
			add(runTo(text, p, func(r rune) bool { return r == rune(q) || r == '\n' || r == '\r' }))
		case strings.HasSuffix(before, "]("):
			e := runTo(text, p, func(r rune) bool { return r == ')' || r == ' ' || r == '\t' || r == '\n' })
			if !titled.MatchString(text[e:]) {
				e = runTo(text, p, func(r rune) bool { return r == ')' })
			}
			add(e)
		case strings.HasSuffix(text[:p], "<"):
			add(runTo(text, p, func(r rune) bool { return r == '>' }))
		}
	}
	return out
}

// mdUnescape is s as CommonMark renders it: a backslash before ASCII punctuation removed.
func mdUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", s[i+1]) >= 0 {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hasSpecialScheme(lower string) bool {
	for _, s := range []string{"http:", "https:", "ws:", "wss:", "ftp:", "file:"} {
		if strings.HasPrefix(lower, s) {
			return true
		}
	}
	return false
}

// runTo returns the offset of the first rune at or after p that stop accepts, or len(text).
func runTo(text string, p int, stop func(rune) bool) int {
	for i, r := range text[p:] {
		if stop(r) {
			return p + i
		}
	}
	return len(text)
}

// trimPunct leaves out of text[p:e] the trailing punctuation linkifiers leave out of a link: GFM's
// ".,:!?*~_" and ")", also ";" and "]", and the punctuation of other scripts ("。", "」").
func trimPunct(text string, p, e int) int {
	for e > p {
		r, n := utf8.DecodeLastRuneInString(text[p:e])
		if r < utf8.RuneSelf && !strings.ContainsRune(".,:;!?*~_)]", r) || r >= utf8.RuneSelf && !unicode.IsPunct(r) {
			return e
		}
		e -= n
	}
	return e
}

// gfmTrim leaves out of text[p:] the trailing punctuation GFM leaves out of an autolink.
func gfmTrim(text string, p int) int {
	e := len(text)
	for e > p {
		switch c := text[e-1]; {
		case strings.IndexByte("?!.,:*_~", c) >= 0:
			e--
		case c == ')' && strings.Count(text[p:e], "(") < strings.Count(text[p:e], ")"):
			e--
		default:
			return e
		}
	}
	return e
}

// titled matches white space, a whole link title and the ")" that closes a Markdown link.
var titled = regexp.MustCompile(`^[ \t\n]+("[^"]*"|'[^']*'|\([^)]*\))[ \t\n]*\)`)

// opens is what a browser opens for href: its host ("" for none), whether it carries user info,
// and whether it opens anything at all.
func opens(href string) (host string, userInfo, ok bool) {
	u, err := wurl.Parse(href)
	if err != nil {
		return "", false, false
	}
	return u.Hostname(), u.Username() != "" || u.Password() != "" || strings.Contains(authorityOf(href), "@"), true
}

// authorityOf is the authority of a special URL as written, tabs and line breaks removed.
func authorityOf(href string) string {
	s := strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return -1
		}
		return r
	}, href)
	c := strings.IndexByte(s, ':')
	if c < 0 {
		return ""
	}
	s = strings.TrimLeft(s[c+1:], `/\`)
	if k := strings.IndexAny(s, `/?#\`); k >= 0 {
		s = s[:k]
	}
	return s
}

// resolvable reports whether a host the parser gives could name a machine: an IP address, or a name
// of ASCII letters, digits, hyphens, underscores and dots without an empty label (DNS has no other
// names a registry hands out). A reader whose host holds anything else opens nothing; "" is a link
// without a host.
func resolvable(host string) bool {
	if host == "" || strings.HasPrefix(host, "[") {
		return true
	}
	if strings.HasPrefix(host, ".") || strings.Contains(host, "..") {
		return false // an empty label
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; !isAlnumByte(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// failsEveryHostsCheck reports whether a scan hosts check refuses the item whatever its list.
func failsEveryHostsCheck(it Item) bool {
	for _, r := range it.Readings() {
		if r.Unreadable || r.Host == "" || r.UserInfo {
			return true
		}
		if _, err := vet.NormHost(r.Host); err != nil {
			return true
		}
	}
	return false
}

// checkReaders checks the property on text; it returns the links it checked.
func checkReaders(t *testing.T, text string) int {
	t.Helper()
	items := Find(text, URL)
	n := 0
	for _, l := range browserReaders(text) {
		host, userInfo, ok := opens(l.href)
		if !ok || !userInfo && !resolvable(host) {
			continue
		}
		n++
		var cover []Item
		for _, it := range items {
			if it.Start <= l.start && l.start < max(it.End, it.Start+1) {
				cover = append(cover, it)
			}
		}
		if covered(cover, host, userInfo) {
			continue
		}
		t.Errorf("in %q a reader opens %q (host %q, user info %v); the scanner reads %s", text, l.href, host, userInfo, showItems(text, cover))
	}
	return n
}

// covered reports whether one of the items that cover a link fails every hosts check or reads the
// host the browser opens.
func covered(items []Item, host string, userInfo bool) bool {
	for _, it := range items {
		if failsEveryHostsCheck(it) {
			return true
		}
		if userInfo || host == "" {
			continue
		}
		for _, r := range it.Readings() {
			if sameHost(r.Host, host) || sentenceEnd(host, r.Host) {
				return true
			}
		}
	}
	return false
}

// sameHost compares hosts as a hosts list does: one trailing dot does not count.
func sameHost(a, b string) bool {
	return strings.TrimSuffix(a, ".") == strings.TrimSuffix(b, ".")
}

// sentenceEnd reports whether the scanner read host as read, the sentence that goes on after a
// host cut from it (see sentenceCut): host is read and a last label that is no top-level domain,
// so no browser can open it.
func sentenceEnd(host, read string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	return strings.HasPrefix(host, read+".") && !strings.Contains(host[len(read)+1:], ".") && !icannTLD(last)
}

func showItems(text string, items []Item) string {
	if len(items) == 0 {
		return "no link there"
	}
	var s []string
	for _, it := range items {
		s = append(s, show(text, it))
	}
	return strings.Join(s, "; ")
}

// wptInputs reads the inputs of the web-platform-tests URL corpus.
func wptInputs(t testing.TB) []string {
	b, err := os.ReadFile("testdata/wpt/urltestdata.json")
	if err != nil {
		t.Fatal(err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	var inputs []string
	for _, r := range raw {
		var c struct {
			Input *string `json:"input"`
		}
		if json.Unmarshal(r, &c) == nil && c.Input != nil {
			inputs = append(inputs, *c.Input)
		}
	}
	return inputs
}

// wptTexts writes a corpus input the ways a link is written: in an HTML attribute, a Markdown
// destination, angle brackets, bare text and a JSON string, each where the form can hold it.
func wptTexts(in string) []string {
	texts := []string{`<a href="` + html.EscapeString(in) + `">x</a>`, `<a title=x href='` + html.EscapeString(in) + `'>x</a>`}
	plain := !strings.ContainsFunc(in, func(r rune) bool { return r <= ' ' || r == 0x7f || strings.ContainsRune("<>&\\", r) })
	if plain {
		texts = append(texts, "see "+in+" now", "*"+in+"*", "<"+in+">")
		if !strings.ContainsAny(in, "()") {
			texts = append(texts, "[x]("+in+")")
		}
	}
	if b, err := json.Marshal(in); err == nil && !strings.ContainsAny(in, "\\\"") {
		texts = append(texts, `{"href":`+string(b)+`}`)
	}
	return texts
}

// TestLinkHostsAgainstWPT: every input of the web-platform-tests URL corpus, written as a link in
// every form that can hold it, is read with the browser's host or fails every hosts check.
func TestLinkHostsAgainstWPT(t *testing.T) {
	t.Parallel()
	inputs := wptInputs(t)
	if len(inputs) < 500 {
		t.Fatalf("the corpus has %d inputs", len(inputs))
	}
	links := 0
	for _, in := range inputs {
		for _, text := range wptTexts(in) {
			links += checkReaders(t, text)
		}
	}
	if links < 1000 {
		t.Fatalf("only %d links checked", links)
	}
}

// TestLinkHostsOfEscapesAndRelativeLinks: a Markdown renderer undoes backslash escapes in a link
// ("a.com\@b.net" links b.net), and a browser opens a scheme-relative link's host whatever its form
// (a number, a name under no public suffix); the scanner reads both as they do.
func TestLinkHostsOfEscapesAndRelativeLinks(t *testing.T) {
	t.Parallel()
	for _, text := range []string{
		`[x](https://acme.com\@evil.net/)`, `[x](<https://acme.com\@evil.net/>)`, "see https://acme.com\\@evil.net/ now",
		`[x](https://acme.com\:x\@evil.net/)`, `<a href="//1249767508/login">x</a>`, `<a href='\\0x4a.0x7e.0x3.0x54/'>x</a>`,
		`<a href=//1249767508/login>x</a>`, "[x]\n\n[x]: //1249767508/login", `<div style="background:url('//1249767508/x')">`,
		`<meta http-equiv="refresh" content="0; url=//1249767508/">`, `<form action=//evil.corp/>`,
		`[x](//1249767508/login)`, `<//evil.internal/>`, `{"href":"//evil.internal/x"}`,
	} {
		if checkReaders(t, text) == 0 {
			t.Errorf("in %q the readers see no link", text)
		}
	}
}

// TestPlainHostAgreesWithParser: the reading without the parser gives the parser's host.
func TestPlainHostAgreesWithParser(t *testing.T) {
	t.Parallel()
	auths := []string{"acme.com", "ACME.com.", "a..b.com", "-x-.com", "x.com:443", "x.com:0000080", "x.com:", "ab--cd.com", ".x.com",
		"xn--bcher-kva.de", "XN--a.com", "1.2.3.4", "0x7f.1", "a.0x", "x.com:65536", "x.com:99999999", "a.b.c.d.e.f.g", "x.1a", "x.com..", "x",
		"a|b@acme.com", "@acme.com", "acme.com@", "a@b@c.com:80", "a b@x.com", "a\tb@x.com"}
	for _, in := range wptInputs(t) {
		auths = append(auths, authorityOf(in))
	}
	for _, a := range auths {
		checkPlainHost(t, a)
	}
}

// checkPlainHost compares the reading of an authority without the parser with the parser's.
func checkPlainHost(t *testing.T, auth string) {
	t.Helper()
	if fast, slow := webHost("https://", auth, true), webHost("https://", auth, false); fast != slow {
		t.Errorf("authority %q: read without the parser %+v, by the parser %+v", auth, fast, slow)
	}
}

func FuzzPlainHost(f *testing.F) {
	for _, s := range []string{"acme.com", "x.com:80", "a.0x1", "xn--a.com", "A.B", "a|b@acme.com", "@x.com", "a@", "a@b@C.com:8"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, auth string) {
		if strings.ContainsAny(auth, "/?#\\") {
			return
		}
		checkPlainHost(t, auth)
	})
}

// FuzzLinkHosts: for any text, every link a browser-like reader could see whose host differs from
// what the scanner reports makes a hosts check fail. Seeds: testdata/fuzz/FuzzLinkHosts.
func FuzzLinkHosts(f *testing.F) {
	for _, s := range []string{
		"Log in: https://acme.com|@evil.net/login", `<a href="https://acme.com @evil.net/">x</a>`,
		`[x](https://acme.com"@evil.net/)`, "https://acme.com`@evil.net", "https://acme.com\u3000@evil.net",
		`"https://acme.com"@evil.net/x`, "www.acme.com.They said", "https:\\\\evil.net\\x", "http://3232235777/",
		`{"u": "https://a.com @b.net"}`, "<https://a.com|@b.net>", "(https://a.com)@b.net", "**https://a.com**@b.net",
		`[x](https://a.com\@b.net/)`, "[x]: https://a.com\\@b.net/", `<a href="//3232235777/">x</a>`, `[x](//0x7f.1/)`, `<//b.corp/>`,
		"=//|@0", "<a href=//a|@evil.net/>", "url(//a^@evil.net/)", "[x]: //a{@evil.net/", "href=//a\u3000@evil.net/",
	} {
		f.Add(s)
	}
	for _, tc := range scanCases {
		f.Add(tc.text)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 512 || !utf8.ValidString(text) {
			return
		}
		checkReaders(t, text)
	})
}
