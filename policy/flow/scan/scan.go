// Package scan finds the URLs, email addresses and IBANs written inside free text (a mail body, a
// chat message, a tool's output), in time linear in the text and without regular expressions. It
// reports where each item is written, a link's host as the WHATWG URL parser reads it in every way
// a reader could end the link (see Reading), and the other parts as written.
//
// It owns what counts as an item and where one ends. It does not normalise hosts for comparison
// (policy/vet's NormHost does) nor decide anything about the items (policy/flow does).
package scan

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
	"golang.org/x/text/unicode/norm"
)

// Kind is a kind of item; kinds combine as a bit set.
type Kind uint8

// The kinds of item.
const (
	// URL is a link: "scheme://host/..." for any scheme (and "http:host" without slashes, as
	// browsers read it), a link of a scheme browsers act on without a host ("javascript:",
	// "data:", "vbscript:", "blob:", "filesystem:", "view-source:", "about:", "file:" without
	// "//"; see HostlessScheme), or a host without a scheme ("www.x.com/login", "x.com",
	// "//x.com") whose name starts with "www.", is an IPv4 address, or ends in a top-level domain
	// of the public suffix list's ICANN section (so "readme.md" is a link, as chat clients link
	// it, and "notes.txt" is not).
	URL Kind = 1 << iota
	// Email is an address local@domain, the domain holding a dot and ending in a label of two or
	// more letters (or punycode), or an IPv4 address, bare or in brackets ("bob@[192.0.2.1]"). A
	// quoted local part is read as RFC 5322 reads it: '"bob@acme.com"@evil.net' is an address at
	// evil.net (and bob@acme.com, as a linkifier reads it, is found too).
	Email
	// IBAN is two letters, two check digits and 11 to 30 letters or digits, in one piece or in
	// groups separated by white space (line breaks too), invisible format characters or a hyphen,
	// the country code possibly apart ("GB 82 WEST …", a country this package knows), letters and
	// digits in full-width or other compatibility forms read as NFKC reads them, whose mod-97
	// checksum holds (ISO 13616) and, for a country this package knows, whose length is that
	// country's.
	IBAN
)

// All is every kind.
const All = URL | Email | IBAN

// String lists the kinds: "url, email, iban".
func (k Kind) String() string {
	var names []string
	for _, n := range []struct {
		k    Kind
		name string
	}{{URL, "url"}, {Email, "email"}, {IBAN, "iban"}} {
		if k&n.k != 0 {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ", ")
}

// Item is one thing found in a text.
type Item struct {
	Kind Kind
	// Start and End are byte offsets: text[Start:End] is the item as written, trailing punctuation
	// left out. Items of different kinds may overlap (an email inside a URL's path).
	Start, End int
	// Scheme is a URL's scheme in lower case; "" for a URL written without one.
	Scheme string
	// Host is a URL's host as the WHATWG URL parser reads the item (see Reading), or an email's
	// domain as written. It is "" for a URL without a host ("file:///x", "javascript:...").
	Host string
	// UserInfo is set for a URL that carries user info before its host
	// ("https://bank.com@evil.net").
	UserInfo bool
	// Malformed is set for a URL whose host cannot be read (the parser refuses it, or its
	// authority runs over 1 KiB), and for an address whose quoted local part cannot be read.
	Malformed bool
	// Alt holds the other readings of a URL where readers end it elsewhere than the item does
	// (see Readings), each different from the item's own.
	Alt []Reading
	// Value is an IBAN without separators, in upper case; "" for other kinds.
	Value string
	// Decoded is the item as a browser reads it, when it was found only so and that differs from
	// text[Start:End] (see Find); "" otherwise. Host and Value are then parts of Decoded.
	Decoded string
}

// Readings returns every reading of a URL item: its own (Host, UserInfo, Malformed), then Alt.
func (it Item) Readings() []Reading {
	return append([]Reading{{Host: it.Host, UserInfo: it.UserInfo, Unreadable: it.Malformed}}, it.Alt...)
}

// Text returns the item as read in text, the text it was found in: Decoded, else text[Start:End].
func (it Item) Text(text string) string {
	if it.Decoded != "" {
		return it.Decoded
	}
	return text[it.Start:it.End]
}

// Find returns the items of the given kinds in text, ordered by Start (then by End). It reads text
// twice when a browser would read it otherwise: as written, and with character references decoded
// and ASCII tabs and line breaks removed inside the quoted attribute values of HTML tags (as a
// browser reads '<a href="https://x.com&#10;.evil.net">'); an item found only in that reading
// covers the bytes it was read from and carries Decoded.
func Find(text string, kinds Kind) []Item {
	items := find(text, kinds)
	if v, ok := decodedView(text); ok {
		seen := make(map[itemKey]bool, len(items))
		for _, it := range items {
			seen[it.key(text)] = true
		}
		for _, it := range find(v.text, kinds) {
			if it = v.mapItem(text, it); !seen[it.key(text)] {
				seen[it.key(text)] = true
				items = append(items, it)
			}
		}
		sortItems(items)
	}
	return items
}

// itemKey is an item as a comparable value.
type itemKey struct {
	kind                         Kind
	start, end                   int
	scheme, host, value, decoded string
	userInfo, malformed          bool
	alt                          string
}

// key is the item as a comparable value; items whose texts differ only in backslash escapes (which
// the decoded view undoes) are one.
func (it Item) key(text string) itemKey {
	var alt strings.Builder
	for _, r := range it.Alt {
		fmt.Fprintf(&alt, "%q %t %t;", r.Host, r.UserInfo, r.Unreadable)
	}
	return itemKey{it.Kind, it.Start, it.End, it.Scheme, it.Host, it.Value, unescaped(it.Text(text)), it.UserInfo, it.Malformed, alt.String()}
}

// unescaped is s with its backslash escapes of ASCII punctuation undone.
func unescaped(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && isASCIIPunct(s[i+1]) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// find returns the items of text as written, ordered.
func find(text string, kinds Kind) []Item {
	var items []Item
	if kinds&(URL|Email) != 0 {
		r := newReaders(text)
		forTokens(text, func(start, end int) {
			items = findInToken(r, items, start, end, kinds)
		})
	}
	if kinds&IBAN != 0 {
		items = findIBANs(items, text)
	}
	sortItems(items)
	return items
}

// Whole returns the one item of kind k that spans all of s as written, if s is exactly one such
// item.
func Whole(s string, k Kind) (Item, bool) {
	for _, it := range find(s, k) {
		if it.Kind == k && it.Start == 0 && it.End == len(s) {
			return it, true
		}
	}
	return Item{}, false
}

// sortItems sorts by (Start, End), keeping the order of equal items.
func sortItems(items []Item) {
	slices.SortStableFunc(items, func(a, b Item) int {
		if a.Start != b.Start {
			return a.Start - b.Start
		}
		return a.End - b.End
	})
}

func less(a, b Item) bool {
	if a.Start != b.Start {
		return a.Start < b.Start
	}
	return a.End < b.End
}

// isDelim reports whether r separates tokens: white space, control characters, quotes, angle
// brackets and the characters that never appear unescaped in a link.
func isDelim(r rune) bool {
	if r < utf8.RuneSelf {
		return r <= ' ' || r == 0x7f || r == '"' || r == '\'' || r == '<' || r == '>' || r == '`' || r == '{' || r == '}' || r == '|' || r == '^'
	}
	switch r {
	case '"', '\'', '<', '>', '`', '{', '}', '|', '^', utf8.RuneError:
		return true
	}
	return unicode.IsSpace(r) || unicode.IsControl(r)
}

// forTokens calls fn for every maximal run of non-delimiters in text.
func forTokens(text string, fn func(start, end int)) {
	start := -1
	for i := 0; i < len(text); {
		r, n := rune(text[i]), 1
		if r >= utf8.RuneSelf {
			r, n = utf8.DecodeRuneInString(text[i:])
		}
		if r == utf8.RuneError && n <= 1 || isDelim(r) {
			if start >= 0 {
				fn(start, i)
				start = -1
			}
		} else if start < 0 {
			start = i
		}
		i += n
	}
	if start >= 0 {
		fn(start, len(text))
	}
}

// isDot reports whether r is a full stop that IDNA reads as the label separator.
func isDot(r rune) bool {
	return r == '.' || r == '\u3002' || r == '\uff0e' || r == '\uff61'
}

// isHostRune reports whether r may be part of a host name as written: letters, numbers of any kind
// (IDNA maps "½" and "²" to digits), marks, '-', '_', full stops, and invisible format characters
// (which IDNA drops, so they must not split a name: "evil\u200b.com" is evil.com).
func isHostRune(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
	}
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r) || isDot(r) || unicode.Is(unicode.Cf, r)
}

// isLocalRune reports whether r may be part of an email's local part.
func isLocalRune(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._%+-", r)
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

func isSchemeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'
}

func isLetterByte(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// specialScheme reports whether browsers read "scheme:" followed by any number of slashes and
// backslashes (none included) as the start of a host.
func specialScheme(s string) bool {
	switch s {
	case "http", "https", "ws", "wss", "ftp":
		return true
	}
	return false
}

// HostlessScheme reports whether a browser acts on a link of scheme s (lower case) without
// opening a host named in it: it runs script (javascript, vbscript), shows content the link
// carries or points into (data, blob, filesystem, view-source) or a page of its own (about). A
// "file:" link without "//" is hostless too (see Find). Such a link has no host a hosts list can
// allow. mailto, tel and sms hand the link to another program; their address is an Email item.
func HostlessScheme(s string) bool {
	switch s {
	case "javascript", "vbscript", "data", "blob", "filesystem", "view-source", "about":
		return true
	}
	return false
}

// tokenEnds holds what findInToken needs to end a URL in O(1): the token's end with trailing
// punctuation stripped, and counts of opening and closing brackets before each offset.
type tokenEnds struct {
	base             int // offset of the token in the text
	stripped         int // end of the token without its trailing punctuation (closing brackets too)
	open, close      []int32
	closersAfterStem int // closing brackets ")" "]" directly after stripped
}

func newTokenEnds(text string, start, end int) *tokenEnds {
	t := &tokenEnds{base: start, open: make([]int32, end-start+1), close: make([]int32, end-start+1)}
	for i := start; i < end; i++ {
		o, c := t.open[i-start], t.close[i-start]
		switch text[i] {
		case '(', '[':
			o++
		case ')', ']':
			c++
		}
		t.open[i-start+1], t.close[i-start+1] = o, c
	}
	e := end
	for e > start {
		r, n := utf8.DecodeLastRuneInString(text[start:e])
		if !isTrailingPunct(r) {
			break
		}
		e -= n
	}
	t.stripped = e
	for i := e; i < end && (text[i] == ')' || text[i] == ']'); i++ {
		t.closersAfterStem++
	}
	return t
}

// isTrailingPunct reports whether r, at the end of a token, is punctuation around a link rather
// than part of it.
func isTrailingPunct(r rune) bool {
	if r < utf8.RuneSelf {
		return strings.ContainsRune(".,:;!?*~_)]", r)
	}
	return unicode.IsPunct(r) // "。", "」", "՟": punctuation of any script
}

// end returns where an item that starts at s and runs to the end of the token ends: trailing
// punctuation left out, except closing brackets balanced by opening ones inside the item
// ("https://en.wikipedia.org/wiki/Go_(language)").
func (t *tokenEnds) end(s int) int {
	e := t.stripped
	if e <= s {
		return s
	}
	opens := int(t.open[e-t.base] - t.open[s-t.base])
	closes := int(t.close[e-t.base] - t.close[s-t.base])
	if extra := opens - closes; extra > 0 {
		e += min(extra, t.closersAfterStem)
	}
	return e
}

// findInToken appends the URLs and emails of text[start:end], a token.
func findInToken(r *readers, items []Item, start, end int, kinds Kind) []Item {
	text := r.text
	tok := text[start:end]
	if !mayHoldLink(tok) {
		return items
	}
	var ends *tokenEnds
	first := len(items) // the token's first item
	firstURL := end     // where the first scheme URL of the token starts
	if kinds&URL != 0 && strings.IndexByte(tok, ':') >= 0 {
		authEnd := start // a colon inside an authority already read starts no URL ("http:http:...")
		for i := start; i < end; i++ {
			if text[i] != ':' || i < authEnd {
				continue
			}
			it, l, ae, ok := r.schemeURL(start, i, end)
			if !ok {
				continue
			}
			authEnd = ae
			if ends == nil {
				ends = newTokenEnds(text, start, end)
			}
			it.End = max(ends.end(it.Start), i+1)
			if l.a >= 0 {
				r.setReadings(&it, l)
			}
			items = append(items, it)
			firstURL = min(firstURL, it.Start)
		}
	}
	if kinds&(Email|URL) != 0 && strings.IndexByte(tok, '@') >= 0 {
		for i := start; i < end; i++ {
			if text[i] != '@' {
				continue
			}
			it, ok := r.email(start, i, end)
			if !ok {
				continue
			}
			if kinds&Email != 0 {
				items = append(items, it)
			}
			// "ok.com@evil.net/login" is a link to evil.net with user info, if no scheme URL covers
			// it; so is "www.ok.com@evil.net", which GFM links as a www. host.
			path := it.End < end && strings.IndexByte("/\\?#", text[it.End]) >= 0
			www := len(text)-it.Start > 4 && strings.EqualFold(text[it.Start:it.Start+4], "www.")
			if kinds&URL != 0 && it.Start >= start && (path || www) && it.Start < firstURL {
				if ends == nil {
					ends = newTokenEnds(text, start, end)
				}
				u := Item{Kind: URL, Start: it.Start, End: max(ends.end(it.Start), it.End)}
				r.setReadings(&u, link{ctxStart: it.Start, a: it.Start, prefix: "https://", special: true, plain: true})
				items = append(items, u)
			}
		}
	}
	if kinds&URL != 0 {
		for i := start; i < firstURL; {
			c, n := utf8.DecodeRuneInString(text[i:])
			if !isHostRune(c) {
				i += n
				continue
			}
			j := i
			for j < end {
				c, n := utf8.DecodeRuneInString(text[j:])
				if !isHostRune(c) {
					break
				}
				j += n
			}
			if it, ok := bareHost(text, start, i, j, end); ok && it.Start < firstURL {
				if it.End > j {
					if ends == nil {
						ends = newTokenEnds(text, start, end)
					}
					it.End = max(ends.end(it.Start), j)
				}
				ctxStart := it.Start
				if i-2 >= start && isSlash(text[i-1]) && isSlash(text[i-2]) {
					ctxStart = i - 2 // "//x.com": the link starts at its slashes
				}
				www := len(it.Host) > 4 && strings.EqualFold(it.Host[:4], "www.")
				r.setReadings(&it, link{ctxStart: ctxStart, a: it.Start, prefix: "https://", special: true, plain: true, bare: www})
				items = append(items, it)
			}
			i = j
		}
		items = relativeLinks(r, items, first, start, end, &ends)
	}
	return items
}

// sameReadings reports whether item a reads every reading of b.
func sameReadings(a, b Item) bool {
	for _, rb := range b.Readings() {
		if !slices.Contains(a.Readings(), rb) {
			return false
		}
	}
	return true
}

// userInfoOn reports whether the value that starts at i runs on past the token's end at a, spaces
// included, to an "@" before its closer ('href="// x@evil.net"': user info, then a host).
func userInfoOn(text string, i, a int) bool {
	ctx, closer := contextAt(text, i)
	quoted := ctx == ctxAttr || ctx == ctxDest || ctx == ctxAngle
	if !quoted && !valueStart(text, i) || a == len(text) {
		return false
	}
	for k := a; k < len(text) && k-a <= maxAuthority; k++ {
		switch c := text[k]; {
		case c == '@':
			return true
		case quoted && c == closer, !quoted && strings.IndexByte(valueStops, c) >= 0, c == '\n', c == '\r', c == '/', c == '?', c == '#', c == '\\':
			return false // an unquoted value ("href=//x|@y") ends at white space or '>' alone
		}
	}
	return false
}

// valueStart reports whether a URL value starts at i: a quoted attribute value, a Markdown
// destination or "<...>" (contextAt), an unquoted attribute value or parameter ("href=", "url="),
// CSS's "url(" (quoted or not), or a Markdown reference definition ("[x]: ").
func valueStart(text string, i int) bool {
	if ctx, _ := contextAt(text, i); ctx == ctxAttr || ctx == ctxDest || ctx == ctxAngle {
		return true
	}
	k := i
	if k > 0 && (text[k-1] == '\'' || text[k-1] == '"') {
		k-- // url('//x')
	}
	if k > 0 && text[k-1] == '=' || k >= 4 && strings.EqualFold(text[k-4:k], "url(") {
		return true
	}
	for k = i; k > 0 && i-k < maxLookahead && (text[k-1] == ' ' || text[k-1] == '\t'); k-- {
	}
	return k >= 2 && text[k-1] == ':' && text[k-2] == ']'
}

// relativeLinks appends the scheme-relative links of the token [start, end) that a value or
// destination holds ('href="//x"', "href=//x", "](//x)", "<//x>", "url(//x)", "[x]: //x"; see
// valueStart): a browser opens the host after the slashes
// whatever its form ("//3232235777/", "//intranet.corp/"), so it is read whatever the host looks
// like, unless an item that starts there already reads it so (first is the token's first item).
// A value inside a scheme URL counts too ("https://a.com/r?u=//evil.net": a server may redirect).
func relativeLinks(r *readers, items []Item, first, start, end int, ends **tokenEnds) []Item {
	text := r.text
	var starts map[int]int // where the token's URL items start: their indexes
	for i := start; i+1 < end; i++ {
		if !isSlash(text[i]) || !isSlash(text[i+1]) || i > start && (isSlash(text[i-1]) || text[i-1] == ':') {
			continue
		}
		if !valueStart(text, i) {
			continue
		}
		a := i
		for a < end && isSlash(text[a]) {
			a++
		}
		if a == end && !userInfoOn(text, i, a) {
			continue
		}
		if starts == nil {
			starts = map[int]int{}
			for k := first; k < len(items); k++ {
				if items[k].Kind == URL {
					starts[items[k].Start] = k
				}
			}
		}
		if *ends == nil {
			*ends = newTokenEnds(text, start, end)
		}
		it := Item{Kind: URL, Start: i, End: max((*ends).end(i), a)}
		r.setReadings(&it, link{ctxStart: i, a: a, prefix: "https://", special: true, relative: true})
		if it.End <= a && a < len(text) && readsHost(it) {
			_, n := utf8.DecodeRuneInString(text[a:]) // the value runs on to a host ("=//!|@x",
			it.End = a + n                            // "=//_"): the item covers the authority's start
		}
		covered := false
		for k := i; k <= a; k++ {
			if o, ok := starts[k]; ok && sameReadings(items[o], it) {
				covered = true // an item there already reads it so ("//www.x.com")
			}
		}
		if !covered {
			items = append(items, it)
		}
	}
	return items
}

// readsHost reports whether a reading of the item has a host or user info.
func readsHost(it Item) bool {
	for _, r := range it.Readings() {
		if r.UserInfo || r.Host != "" {
			return true
		}
	}
	return false
}

func isSlash(c byte) bool { return c == '/' || c == '\\' }

// mayHoldLink reports whether a token holds a byte that every URL or email needs one of: a colon,
// an at sign, a full stop or slash of any kind (the non-ASCII ones start with a byte >= 0x80).
func mayHoldLink(tok string) bool {
	for i := 0; i < len(tok); i++ {
		switch c := tok[i]; {
		case c == ':', c == '@', c == '.', c == '/', c == '\\', c >= utf8.RuneSelf:
			return true
		}
	}
	return false
}

// schemeURL reads a URL whose scheme ends at the colon at c, within the token [start, end): the
// item (Start and Scheme), how to read its host (l.a is -1 for a link without a host), and where
// a tokenizer ends its authority (ae: a colon before it starts no other URL).
func (r *readers) schemeURL(start, c, end int) (it Item, l link, ae int, ok bool) {
	text := r.text
	s := c
	for s > start && isSchemeByte(text[s-1]) {
		s--
	}
	for s < c && !isLetterByte(text[s]) { // a scheme starts with a letter
		s++
	}
	if s == c {
		return Item{}, link{}, 0, false
	}
	scheme := strings.ToLower(text[s:c])
	it = Item{Kind: URL, Start: s, Scheme: scheme}
	hostless := link{a: -1}
	a := c + 1
	slashes := 0
	for a < end && isSlash(text[a]) {
		a++
		slashes++
	}
	l = link{ctxStart: s, special: true, bare: true, scheme: true}
	switch {
	case HostlessScheme(scheme), scheme == "file" && slashes < 2:
		if c+1 < end {
			return it, hostless, c + 1, true
		}
		// "javascript:" alone in its token: a link where a value or destination starts with it.
		if ctx, _ := contextAt(text, s); ctx == ctxAttr || ctx == ctxDest || ctx == ctxAngle {
			return it, hostless, c + 1, true
		}
		return Item{}, link{}, 0, false
	case specialScheme(scheme):
		if slashes == 0 && (a == end && !r.readOn(s, a) || a < end && strings.IndexByte("?#", text[a]) >= 0) {
			return Item{}, link{}, 0, false // "http:" alone, or a relative "http:?q" (no host)
		}
		l.plain = true
	case scheme == "file":
		a = c + 3
	case strings.HasPrefix(text[c+1:end], "//"):
		a = c + 3 // "foo://x": an opaque host
		l.special = false
	default:
		return Item{}, link{}, 0, false // "mailto:", "note:" and other schemes without a host
	}
	l.a, l.prefix = a, text[s:a]
	ae = a
	for ae < end && ae-a <= maxAuthority {
		ch := text[ae]
		if ch == '/' || ch == '\\' || ch == '?' || ch == '#' {
			break
		}
		r, n := utf8.DecodeRuneInString(text[ae:])
		if !isHostRune(r) && !strings.ContainsRune(":@[]%!$&()*+,;=~", r) {
			break
		}
		ae += n
	}
	return it, l, ae, true
}

// readOn reports whether a reader goes on past the end of the token at a, where a link that
// starts at s has no authority in its token ('http:"@evil.net'): a value or destination that holds
// the link, GFM's autolinks, or a linkifier that reads user info.
func (r *readers) readOn(s, a int) bool {
	text := r.text
	if a == len(text) {
		return false
	}
	if ctx, closer := contextAt(text, s); (ctx == ctxAttr || ctx == ctxDest || ctx == ctxAngle) && text[a] != closer {
		return true // a value or destination runs on, spaces included
	}
	if r.next(at('@'), a) < r.next(stopKey{extra: userStops}, a) {
		return true
	}
	return strings.IndexByte(asciiSpace+"<", text[a]) < 0 && gfmStarts(text, s)
}

// maxAuthority bounds the bytes read for one URL's authority (user info, host and port).
const maxAuthority = 1024

// isHostStart reports whether text[i:] starts with a host rune.
func isHostStart(text string, i int) bool {
	r, _ := utf8.DecodeRuneInString(text[i:])
	return isHostRune(r) || r == '['
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// email reads the address around the '@' at at, within the token [start, end): a dot-atom local
// part inside the token, or a quoted one that ends right before the '@' (which may start before
// the token: quotes end tokens).
func (r *readers) email(start, at, end int) (Item, bool) {
	text := r.text
	host, e, ok := emailDomain(text, at, end)
	if !ok {
		return Item{}, false
	}
	s := at
	for s > start {
		c, n := utf8.DecodeLastRuneInString(text[start:s])
		if !isLocalRune(c) {
			break
		}
		s -= n
	}
	for s < at && text[s] == '.' {
		s++
	}
	if s == at {
		// An atom of RFC 5322 (and 6532) that ends in one of its other characters
		// ("!#$%&'*+-/=?^_`{|}~" and any UTF-8), some of which end tokens ("'", "|").
		for s > 0 {
			c, n := utf8.DecodeLastRuneInString(text[:s])
			if c < utf8.RuneSelf && !isAlnumByte(byte(c)) && c != '.' && strings.IndexByte(atext, byte(c)) < 0 || c >= utf8.RuneSelf && (unicode.IsSpace(c) || unicode.IsControl(c) || c == utf8.RuneError) {
				break
			}
			s -= n
		}
	}
	if s < at {
		return Item{Kind: Email, Start: s, End: e, Host: host}, true
	}
	if at == 0 || text[at-1] != '"' || escaped(text, at-1) {
		return Item{}, false
	}
	open, st := r.quotedLocal(at - 1)
	switch st {
	case quoteNone:
		return Item{}, false
	case quoteTooLong:
		return Item{Kind: Email, Start: at - 1, End: e, Host: host, Malformed: true}, true
	}
	r.quoteFloor = open
	return Item{Kind: Email, Start: open, End: e, Host: host}, true
}

// atext are the characters of an RFC 5322 atom besides letters and digits.
const atext = "!#$%&'*+-/=?^_`{|}~"

// maxQuotedLocal bounds the bytes read back for a quoted local part (RFC 5321 allows 64 octets of
// local part, twice that with escapes).
const maxQuotedLocal = 256

// quotedLocal finds the opening quote of the quoted string whose closing quote is at q, and checks
// what lies between as RFC 5322 reads a quoted string (printable characters and spaces, any
// character escaped by a backslash). The search stops at the last quoted local part found, so all
// searches of a text read it once, and after maxQuotedLocal bytes: a longer one cannot be read.
func (r *readers) quotedLocal(q int) (open int, st quoted) {
	text := r.text
	floor := max(r.quoteFloor, q-maxQuotedLocal, 0)
	for k := q - 1; k >= floor; k-- {
		if text[k] != '"' || escaped(text, k) {
			continue
		}
		if prev, _ := utf8.DecodeLastRuneInString(text[:k]); k > 0 && isLocalRune(prev) && prev != '.' || !utf8.ValidString(text[k+1:q]) {
			return 0, quoteNone // 'x"y"@z' is no address; nor is a quoted string of invalid UTF-8
		}
		for i := k + 1; i < q; i++ {
			switch c := text[i]; {
			case c == '\\':
				i++
			case c < ' ' && c != '\t' || c == 0x7f:
				return 0, quoteNone
			}
		}
		return k, quoteFound
	}
	if floor == q-maxQuotedLocal && floor > r.quoteFloor {
		return 0, quoteTooLong
	}
	return 0, quoteNone
}

// quoted is what the search for a quoted local part found.
type quoted uint8

const (
	quoteNone    quoted = iota // no quoted string ends there: no address
	quoteFound                 // its opening quote
	quoteTooLong               // none within maxQuotedLocal: an address that cannot be read
)

// escaped reports whether the byte at i follows an odd run of backslashes.
func escaped(text string, i int) bool {
	n := 0
	for k := i - 1; k >= 0 && text[k] == '\\' && n < maxQuotedLocal; k-- {
		n++
	}
	return n%2 == 1
}

// skipCFWS returns where the white space and comments (unnested) that RFC 5322 allows after an
// address's "@" end, from i; at most maxLookahead bytes are read.
func skipCFWS(text string, i int) int {
	p := i
	for p < len(text) && p-i < maxLookahead {
		switch c := text[p]; {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			p++
		case c == '(':
			k := strings.IndexByte(text[p:min(len(text), i+maxLookahead)], ')')
			if k < 0 {
				return i
			}
			p += k + 1
		default:
			return p
		}
	}
	return i
}

// emailDomain reads the domain after the '@' at at, within the token [start, end): a name whose
// last label has two or more letters (or is punycode), an IPv4 address, or a bracketed address
// literal. e is where the address ends.
func emailDomain(text string, at, end int) (host string, e int, ok bool) {
	if p := skipCFWS(text, at+1); p > at+1 {
		at, end = p-1, len(text) // "bob@ acme.com": RFC 5322 allows white space and comments here
	}
	if at+1 < end && text[at+1] == '[' {
		k := strings.IndexByte(text[at+1:end], ']')
		if k < 0 || k > 64 {
			return "", 0, false
		}
		return text[at+1 : at+2+k], at + 2 + k, true
	}
	e = at + 1
	for e < end {
		c, n := utf8.DecodeRuneInString(text[e:])
		symbol := c >= utf8.RuneSelf && c != utf8.RuneError && unicode.IsSymbol(c) // RFC 6532 takes any UTF-8
		if !isHostRune(c) && !symbol {
			break
		}
		e += n
	}
	e = trimHostEnd(text, at+1, e)
	domain := text[at+1 : e]
	labels := splitLabels(domain)
	if len(labels) < 2 {
		return "", 0, false
	}
	for _, l := range labels {
		if l == "" {
			return "", 0, false
		}
	}
	// The top-level domain as IDNA reads it, invisible format characters dropped
	// ("evil.n\u200bet").
	read := splitLabels(strings.Map(dropFormat, domain))
	if !plausibleTLD(read[len(read)-1]) && !isIPv4(read) {
		return "", 0, false
	}
	return domain, e, true
}

// dropFormat removes invisible format characters (a zero-width space, a word joiner), which IDNA
// drops from a name.
func dropFormat(r rune) rune {
	if r >= utf8.RuneSelf && unicode.Is(unicode.Cf, r) {
		return -1
	}
	return r
}

// trimHostEnd leaves trailing full stops, hyphens, underscores and invisible format characters
// out of a host run [s, e).
func trimHostEnd(text string, s, e int) int {
	for e > s {
		r, n := utf8.DecodeLastRuneInString(text[s:e])
		if !isDot(r) && r != '-' && r != '_' && dropFormat(r) >= 0 {
			break
		}
		e -= n
	}
	return e
}

// splitLabels splits a host as written at its full stops of any kind.
func splitLabels(h string) []string {
	var labels []string
	from := 0
	for i, r := range h {
		if isDot(r) {
			labels = append(labels, h[from:i])
			from = i + utf8.RuneLen(r)
		}
	}
	return append(labels, h[from:])
}

// bareHost reads a host written without a scheme: the run of host runes [i, j) within the token
// [start, end). A path, query, fragment or port right after the host makes the rest of the token
// part of the URL (End is then end, for the caller to trim).
func bareHost(text string, start, i, j, end int) (Item, bool) {
	if i > start {
		switch prev, _ := utf8.DecodeLastRuneInString(text[start:i]); prev {
		case '@':
			return Item{}, false // an email's domain
		case '/', '\\':
			// A path segment, unless the run follows "//" that no scheme precedes ("//x.com/a").
			rel := i-2 >= start && (text[i-2] == '/' || text[i-2] == '\\') && (i-3 < start || text[i-3] != ':')
			if !rel {
				return Item{}, false
			}
		}
	}
	if j < end && text[j] == '@' {
		if _, _, ok := emailDomain(text, j, end); ok {
			return Item{}, false // an email's local part
		}
	}
	for i < j {
		r, n := utf8.DecodeRuneInString(text[i:])
		if !isDot(r) && r != '-' && r != '_' && !unicode.Is(unicode.Cf, r) {
			break // leading dots, hyphens and invisible characters are not part of the host
		}
		i += n
	}
	e := trimHostEnd(text, i, j)
	if e <= i {
		return Item{}, false
	}
	labels := splitLabels(text[i:e])
	if len(labels) < 2 {
		return Item{}, false
	}
	for _, l := range labels {
		if l == "" && !strings.EqualFold(labels[0], "www") { // GFM links "www.x..y" whole
			return Item{}, false
		}
	}
	last := labels[len(labels)-1]
	followed := e == j && e < end && strings.IndexByte("/\\?#:", text[e]) >= 0
	switch cut := sentenceCut(text[i:e]); {
	case strings.EqualFold(labels[0], "www"), isIPv4(labels), icannTLD(last):
	case len(cut) < e-i && !followed:
		e = i + len(cut) // "acme.com.They said": the host ends before the sentence goes on
	default:
		// A top-level domain run into letters of another script: "evil.com立即".
		k := 0
		for k < len(last) && isLetterByte(last[k]) {
			k++
		}
		if k < 2 || k == len(last) || !icannTLD(last[:k]) {
			return Item{}, false
		}
		e -= len(last) - k
	}
	it := Item{Kind: URL, Start: i, End: e, Host: text[i:e]}
	if e == j && e < end && strings.IndexByte("/\\?#:@", text[e]) >= 0 {
		it.End = end
	}
	return it, true
}

// isIPv4 reports whether labels are the four decimal octets of an IPv4 address.
func isIPv4(labels []string) bool {
	if len(labels) != 4 {
		return false
	}
	for _, l := range labels {
		if len(l) == 0 || len(l) > 3 || !allDigits(l) || len(l) == 3 && l > "255" {
			return false
		}
	}
	return true
}

// icannTLD reports whether label is a top-level domain of the ICANN section of the public suffix
// list.
func icannTLD(label string) bool {
	a, err := idna.Lookup.ToASCII(label)
	if err != nil || a == "" || strings.Contains(a, ".") {
		return false
	}
	ps, icann := publicsuffix.PublicSuffix(a)
	return icann && ps == a
}

// plausibleTLD reports whether an email domain's last label can be a top-level domain: two or more
// letters, or punycode.
func plausibleTLD(label string) bool {
	if strings.HasPrefix(strings.ToLower(label), "xn--") {
		return len(label) > 4
	}
	n := 0
	for _, r := range label {
		if !unicode.IsLetter(r) && !unicode.IsMark(r) {
			return false
		}
		n++
	}
	return n >= 2
}

func isDigitByte(c byte) bool { return c >= '0' && c <= '9' }

func isAlnumByte(c byte) bool { return isLetterByte(c) || isDigitByte(c) }

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// findIBANs appends the IBANs of text. A candidate starts where two letters follow something other
// than a letter, digit or mark (a combining mark counts as its base); it reads letters and digits
// joined by separators, and the longest run of whole groups that is a valid IBAN is the item.
func findIBANs(items []Item, text string) []Item {
	var prev rune = ' '
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRuneInString(text[i:])
		if !unicode.IsLetter(prev) && !unicode.IsDigit(prev) && !unicode.IsMark(prev) && isLetterByte(ibanChar(r)) {
			if it, ok := iban(text, i); ok {
				items = append(items, it)
				prev, _ = utf8.DecodeLastRuneInString(text[:it.End])
				i = it.End
				continue
			}
		}
		if !combining(r) {
			prev = r
		}
		i += n
	}
	return items
}

// The bounds of an IBAN's length.
const (
	minIBAN = 15
	maxIBAN = 34
)

// iban reads the longest valid IBAN made of whole groups starting at s. Groups may split the
// country code and the check digits anywhere (a bank form drops the separators), but then the
// country must be one this package knows, and a split after the first letter or the first check
// digit needs one after the check digits too ("D E89 3704", never "GB8 2WEST").
func iban(text string, s int) (Item, bool) {
	var buf [maxIBAN]byte
	n, best, bestEnd, want, cuts := 0, 0, 0, 0, 0
	i := s
	for {
		g := n
		for i < len(text) {
			r, size := utf8.DecodeRuneInString(text[i:])
			c := ibanChar(r)
			if c == 0 {
				k, marked := ignorableRun(text[i:])
				if k > 0 && i+k < len(text) && ibanCharAt(text, i+k) {
					i += k // "D\u200bE89", "DE8\u03019": unseen inside a group, as a reader sees it
					continue
				}
				i += marked // marks on the group's last character are part of what was written
				break
			}
			if n == maxIBAN {
				return ibanItem(s, bestEnd, buf[:best])
			}
			buf[n] = c
			n++
			i += size
		}
		if n == g {
			break
		}
		if i < len(text) {
			if r, _ := utf8.DecodeRuneInString(text[i:]); unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) {
				break // the group runs on into other letters: not a whole token
			}
		}
		if n <= 4 {
			cuts |= 1 << n
		}
		if !ibanHead(buf[:min(n, 4)]) {
			return Item{}, false
		}
		if n >= 2 {
			want = ibanLength(buf[0], buf[1])
		}
		if n >= 4 && !headCuts(cuts, want) {
			return Item{}, false
		}
		if n >= 4 && (want == 0 || n == want) && n >= minIBAN && checksum(buf[:n]) {
			best, bestEnd = n, i
		}
		sep := separatorLen(text[i:])
		if sep == 0 || i+sep >= len(text) {
			break
		}
		i += sep
	}
	return ibanItem(s, bestEnd, buf[:best])
}

// ibanHead reports whether h, an IBAN's first characters read so far, can start one: two letters
// and two digits.
func ibanHead(h []byte) bool {
	for k, c := range h {
		if k < 2 && !isLetterByte(c) || k >= 2 && !isDigitByte(c) {
			return false
		}
	}
	return true
}

// headCuts reports whether the group ends among an IBAN's first four characters (bit k set: a
// group ends after k characters) are a way the IBAN of a country of length want is written.
func headCuts(cuts, want int) bool {
	const inside, afterLetter, afterDigit, afterHead = 1<<1 | 1<<2 | 1<<3, 1 << 1, 1 << 3, 1 << 4
	switch {
	case cuts&inside == 0:
		return true
	case want == 0:
		return false
	case cuts&(afterLetter|afterDigit) != 0:
		return cuts&afterHead != 0
	}
	return true
}

func ibanItem(s, end int, v []byte) (Item, bool) {
	if len(v) == 0 {
		return Item{}, false
	}
	return Item{Kind: IBAN, Start: s, End: end, Value: string(v)}, true
}

// ibanChar is the letter (in upper case) or digit of the ASCII alphabet that r is, or is a
// compatibility form of (full-width "Ｇ", mathematical "𝐆") or carries marks on ("Ë"), as a bank
// form reads it after NFKD without marks; 0 for any other rune.
func ibanChar(r rune) byte {
	switch {
	case r < utf8.RuneSelf:
		if isAlnumByte(byte(r)) {
			return upper(byte(r))
		}
	case r >= '\uff10' && r <= '\uff5a': // the full-width forms, folded as NFKC folds them
		if c := byte(r - 0xfee0); isAlnumByte(c) {
			return upper(c)
		}
	case unicode.IsLetter(r) || unicode.IsDigit(r):
		if f := norm.NFKD.String(string(r)); f != "" && isAlnumByte(f[0]) && onlyMarks(f[1:]) {
			return upper(f[0])
		}
	}
	return 0
}

// ignorableRun is the length of the run of combining marks and invisible format characters at the
// start of s, and the length of that run up to the end of its last mark.
func ignorableRun(s string) (k, marked int) {
	for k < len(s) {
		r, n := utf8.DecodeRuneInString(s[k:])
		switch {
		case combining(r):
			marked = k + n
		case r < utf8.RuneSelf || dropFormat(r) >= 0:
			return k, marked
		}
		k += n
	}
	return k, marked
}

// combining reports whether r is a mark a reader sees as part of the character before it: a
// nonspacing or enclosing mark ("\u0301", "\u20dd").
func combining(r rune) bool {
	return r >= 0x300 && (unicode.Is(unicode.Mn, r) || unicode.Is(unicode.Me, r))
}

// onlyMarks reports whether s holds nothing but combining marks.
func onlyMarks(s string) bool {
	for _, r := range s {
		if !combining(r) {
			return false
		}
	}
	return true
}

// ibanCharAt reports whether an IBAN's letter or digit starts at text[i:].
func ibanCharAt(text string, i int) bool {
	r, _ := utf8.DecodeRuneInString(text[i:])
	return ibanChar(r) != 0
}

// maxSeparator bounds the bytes of one group separator.
const maxSeparator = 96

// separatorLen is the length of the group separator at the start of s: a run of what a reader
// does not see as part of the number — white space of any kind (line breaks, no-break and thin
// spaces included), blank fillers, invisible format characters (a zero-width space), combining
// marks, HTML tags ("</b>") and Markdown's emphasis and code marks ("**", "`") — holding at most
// one mark: a dash of any kind (a hyphen, an en dash, a minus sign), a full stop, a slash, a low
// line, a colon, a comma, a plus, a bar, an apostrophe, a middle dot or a bullet, in any of their
// width forms; 0 when there is none.
func separatorLen(s string) int {
	i, marks := 0, 0
	for i < len(s) && i < maxSeparator {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '<':
			t := tagLen(s[i:])
			if t == 0 {
				return i
			}
			n = t
		case r == '*' || r == '`' || r == '~':
		case unicode.Is(unicode.Pd, r) || strings.ContainsRune("\u2212./_:,+|'\u00b7\u2027\u30fb\u2022\u2219\u22c5\uff0e\uff0f\uff3f\uff65", r):
			marks++
			if marks > 1 {
				return 0
			}
		case unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) || combining(r) ||
			strings.ContainsRune("\u115f\u1160\u2800\u3164\uffa0", r):
		default:
			return i
		}
		i += n
	}
	if i >= maxSeparator {
		return 0
	}
	return i
}

// tagLen is the length of the HTML tag or comment at the start of s ("<b>", "</span>", "<!-- -->"),
// 0 when s does not start with one that ends within maxSeparator bytes.
func tagLen(s string) int {
	if len(s) < 3 || !isLetterByte(s[1]) && s[1] != '/' && s[1] != '!' {
		return 0
	}
	k := strings.IndexAny(s[1:min(len(s), maxSeparator)], "<>")
	if k < 0 || s[1+k] != '>' {
		return 0
	}
	return k + 2
}

// ibanLengths lists IBAN lengths per country (the SWIFT IBAN registry), four characters each.
const ibanLengths = "AD24AE23AL28AT20AZ28BA20BE16BG22BH22BI27BR29BY28CH21CR22CY28CZ24DE22DJ27DK18DO28EE20EG29ES24" +
	"FI18FK18FO18FR27GB22GE22GI23GL18GR27GT28HN28HR21HU28IE22IL23IQ23IS26IT27JO30KW30KZ20LB28LC32LI21LT20" +
	"LU20LV21LY25MC27MD24ME22MK19MN20MR27MT31MU30NI28NL18NO15OM23PK24PL28PS29PT25QA29RO24RS22RU33SA24SC31" +
	"SD18SE24SI19SK24SM27SO23ST25SV28TL23TN24TR26UA29VA22VG24XK20YE30"

// ibanLength is the IBAN length of a country (upper-case letters), 0 when this package does not
// know it.
func ibanLength(c0, c1 byte) int {
	for k := 0; k+4 <= len(ibanLengths); k += 4 {
		if ibanLengths[k] == c0 && ibanLengths[k+1] == c1 {
			return int(ibanLengths[k+2]-'0')*10 + int(ibanLengths[k+3]-'0')
		}
	}
	return 0
}

// ValidIBAN reports whether s, in upper case without separators, is an IBAN: a country code, check
// digits 02 to 98, 15 to 34 letters and digits in all (the country's length where it is known), and
// a mod-97 remainder of 1.
func ValidIBAN(s string) bool {
	if len(s) < minIBAN || len(s) > maxIBAN || !isLetterByte(s[0]) || !isLetterByte(s[1]) {
		return false
	}
	if want := ibanLength(s[0], s[1]); want != 0 && len(s) != want {
		return false
	}
	return checksum([]byte(s))
}

// checksum checks the check digits (02 to 98) and the mod-97 remainder of an upper-case IBAN.
func checksum(s []byte) bool {
	if len(s) < 4 || !isDigitByte(s[2]) || !isDigitByte(s[3]) {
		return false
	}
	if cd := string(s[2:4]); cd == "00" || cd == "01" || cd == "99" {
		return false
	}
	r := 0
	for k := 0; k < len(s); k++ {
		c := s[(k+4)%len(s)]
		switch {
		case isDigitByte(c):
			r = (r*10 + int(c-'0')) % 97
		case c >= 'A' && c <= 'Z':
			r = (r*100 + int(c-'A') + 10) % 97
		default:
			return false
		}
	}
	return r == 1
}
