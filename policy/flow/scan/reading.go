package scan

import (
	"strings"

	wurl "github.com/nlnwa/whatwg-url/url"
)

// Reading is one way a reader may take a link: the host it opens, as the WHATWG URL parser (what
// a browser runs) gives it.
type Reading struct {
	// Host is ASCII and lower case (IDNA applied), an IPv4 address in dotted decimal, an IPv6
	// address in brackets; "" for a link without a host ("file:///x").
	Host string
	// UserInfo is set when the reader sees user info before the host ("https://a.com|@evil.net").
	UserInfo bool
	// Unreadable is set when the parser refuses the link, or its authority runs over maxAuthority:
	// what it opens cannot be known.
	Unreadable bool
}

// The readers of a link. A link's authority (user info, host, port) runs, for every reader, to
// the first of "/", "?", "#" (and "\" for the special schemes) or to where that reader ends the
// link; readers differ only in that end:
//   - the item's own end: its token, as a linkifier that stops at any Unicode space or quote reads
//     it;
//   - GFM's extended autolinks (a scheme URL or a www. host at the start of a line, after white
//     space or one of "*_~("): to ASCII white space or "<", trailing punctuation left out;
//   - a linkifier that reads user info (linkify-it): to ASCII white space, a control or one of
//     "[]()", when an "@" comes before that ('"https://acme.com"@evil.net');
//   - the context the link is written in: a quoted attribute value or JSON string to its closing
//     quote on the same line, spaces included ('href="https://a.com @evil.net/"'); a Markdown link
//     destination to ")" (to the white space before a title, when one follows); "<...>" to ">"; a
//     quote, backtick or bracket of prose to its closer when that comes before ASCII white space.
//
// Tabs and line breaks inside a tag's attribute value are the decoded view's (see Find).
const (
	terms        = "/?#\\"
	termsOpaque  = "/?#" // a scheme that is not special: "\" is an ordinary character
	asciiSpace   = " \t\n\f\r"
	controls     = "\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f"
	maxLookahead = 64 // bytes of white space read around a link to find its context or a title

	spaceLT    = asciiSpace + "<"               // where GFM ends an autolink
	userStops  = asciiSpace + controls + "[]()" // where linkify-it ends user info
	valueStops = asciiSpace + ">"               // where an unquoted attribute value ends
	lineEnds   = "\n\r"
	parenSpace = ")" + asciiSpace
)

// stopKey names a set of stop bytes: an authority's terminators (unless none), a group of other
// stops and one more byte (0 for none).
type stopKey struct {
	opaque, noTerms bool // terminators without "\", or none
	extra           string
	b               byte
}

type linkContext uint8

const (
	ctxBare  linkContext = iota
	ctxAttr              // after `="`, `='`, `":"`: to the closing quote
	ctxDest              // after "](": a Markdown link destination
	ctxAngle             // after "<" or "](<": to ">"
	ctxProse             // after an opening quote, backtick or bracket of prose
)

// readers holds what one pass of find needs to read links in time linear in the text: a finder per
// set of stop bytes, and the last answers of the searches that go backwards.
type readers struct {
	text    string
	finders map[stopKey]*finder
	// trimStop and trimEnd remember the last trailing-punctuation trim: a link that runs to
	// trimStop ends at trimEnd (-1: none yet).
	trimStop, trimEnd int
	// quoteFloor is where the last quoted local part of an address opened: a later one's search for
	// its opening quote stops there.
	quoteFloor int
}

func newReaders(text string) *readers {
	return &readers{text: text, finders: map[stopKey]*finder{}, trimStop: -1}
}

// next returns the offset of the first stop byte of k at or after p, or len(text).
func (r *readers) next(k stopKey, p int) int {
	f := r.finders[k]
	if f == nil {
		f = &finder{}
		stops := k.extra
		switch {
		case k.noTerms:
		case k.opaque:
			stops += termsOpaque
		default:
			stops += terms
		}
		for i := 0; i < len(stops); i++ {
			f.set[stops[i]] = true
		}
		if k.b != 0 {
			f.set[k.b] = true
		}
		r.finders[k] = f
	}
	return f.next(r.text, p)
}

// at is the key of a single stop byte.
func at(b byte) stopKey { return stopKey{noTerms: true, b: b} }

// finder finds the next byte of a set. It remembers its last answer, so queries that move forward
// (or back within one run without a stop) cost one pass over the text in all.
type finder struct {
	set      [256]bool
	known    bool
	from, at int // no byte of the set in text[from:at]; text[at] is one, or at is len(text)
}

func (f *finder) next(text string, p int) int {
	if f.known && p >= f.from && p <= f.at {
		return f.at
	}
	limit := len(text)
	merge := f.known && p < f.from
	if merge {
		limit = f.from
	}
	i := p
	for i < limit && !f.set[text[i]] {
		i++
	}
	if merge && i == limit {
		f.from = p
		return f.at
	}
	f.known, f.from, f.at = true, p, i
	return i
}

// trimmed returns where a link that runs to stop ends once the trailing punctuation GFM leaves out
// of an autolink is left out ("?!.,:*_~" and ")"), not before a.
func (r *readers) trimmed(a, stop int) int {
	if r.trimStop != stop {
		e := stop
		for e > 0 {
			c := r.text[e-1]
			if strings.IndexByte("?!.,:*_~)", c) < 0 {
				break
			}
			e--
		}
		r.trimStop, r.trimEnd = stop, e
	}
	return max(a, r.trimEnd)
}

// contextAt reads what stands before a link that starts at p: its context and the byte that
// closes it.
func contextAt(text string, p int) (linkContext, byte) {
	k := p
	for k > 0 && p-k < maxLookahead && (text[k-1] <= ' ') {
		k-- // the white space and controls a URL parser strips before a value
	}
	if k == 0 {
		return ctxBare, 0
	}
	c := text[k-1]
	switch c {
	case '"', '\'':
		j := k - 1
		for j > 0 && k-1-j < maxLookahead && strings.IndexByte(asciiSpace, text[j-1]) >= 0 {
			j--
		}
		if j > 0 && (text[j-1] == '=' || text[j-1] == ':' && j > 1 && text[j-2] == '"') {
			return ctxAttr, c
		}
	case '(':
		if k >= 2 && text[k-2] == ']' {
			return ctxDest, ')'
		}
	case '<':
		return ctxAngle, '>'
	}
	if k < p {
		return ctxBare, 0
	}
	switch c {
	case '"', '\'', '`':
		return ctxProse, c
	case '(':
		return ctxProse, ')'
	case '[':
		return ctxProse, ']'
	case '{':
		return ctxProse, '}'
	}
	return ctxBare, 0
}

// link describes a URL item to read: where its authority starts, what stands before it for the
// parser, and how it was written.
type link struct {
	ctxStart int    // where the link starts as written, for its context
	a        int    // the authority's start
	prefix   string // the scheme and slashes as written, or "https://" for a link without a scheme
	special  bool   // "\" ends the authority, and the host is a domain (not an opaque host)
	plain    bool   // a scheme whose host a plain ASCII name can be read without the parser
	bare     bool   // GFM links it in bare text: a scheme URL or a www. host
	scheme   bool   // written with a scheme: linkifiers read user info before its host
	relative bool   // scheme-relative in a value: an unquoted one ("href=//x|@y") runs to white space
}

// setReadings reads the item's host as every reader does. Its own reading (to it.End) gives Host,
// UserInfo and Malformed; the other readings that differ go to Alt. A sentence-ending label cut
// from the host (see sentenceCut) shortens it.End.
func (r *readers) setReadings(it *Item, l link) {
	text := r.text
	stopSet := terms
	if !l.special {
		stopSet = termsOpaque
	}
	op := !l.special
	term := r.next(stopKey{opaque: op}, l.a)
	ends := [4]int{max(l.a, min(it.End, term)), -1, -1, -1}
	if l.bare && gfmStarts(text, l.ctxStart) {
		stop := r.next(stopKey{opaque: op, extra: spaceLT}, l.a)
		if stop < len(text) && strings.IndexByte(stopSet, text[stop]) >= 0 {
			ends[1] = stop
		} else {
			ends[1] = r.trimmed(l.a, stop)
		}
	}
	if l.scheme || l.relative {
		stops := userStops
		if l.relative {
			stops = valueStops
		}
		if stop := r.next(stopKey{opaque: op, extra: stops}, l.a); r.next(at('@'), l.a) < stop {
			ends[2] = stop
		}
	}
	ends[3] = r.contextEnd(l, stopSet)
	own := r.read(l, ends[0], stopSet)
	if cut := l.a + own.authLen; ends[0] == it.End && cut < it.End {
		it.End = cut
	}
	it.Host, it.UserInfo, it.Malformed = own.Host, own.UserInfo, own.Unreadable
	for _, e := range ends[1:] {
		if e < 0 || e == ends[0] {
			continue
		}
		rd := r.read(l, e, stopSet).Reading
		if rd != own.Reading && !containsReading(it.Alt, rd) {
			it.Alt = append(it.Alt, rd)
		}
	}
}

func containsReading(rs []Reading, r Reading) bool {
	for _, x := range rs {
		if x == r {
			return true
		}
	}
	return false
}

// contextEnd returns where the link's context ends its authority, -1 when the context adds no
// reading.
func (r *readers) contextEnd(l link, stopSet string) int {
	text := r.text
	ctx, closer := contextAt(text, l.ctxStart)
	op := !l.special
	if l.relative && (ctx == ctxBare || ctx == ctxProse) {
		return r.next(stopKey{opaque: op, extra: valueStops}, l.a) // "href=//x": to white space or '>'
	}
	switch ctx {
	case ctxAttr:
		return r.next(stopKey{opaque: op, extra: lineEnds, b: closer}, l.a)
	case ctxAngle:
		return r.next(stopKey{opaque: op, b: closer}, l.a)
	case ctxDest:
		stop := r.next(stopKey{opaque: op, extra: parenSpace}, l.a)
		if stop < len(text) && strings.IndexByte(asciiSpace, text[stop]) >= 0 && !r.titleFollows(stop) {
			return r.next(stopKey{opaque: op, b: ')'}, stop)
		}
		return stop
	case ctxProse:
		if !l.bare {
			return -1
		}
		stop := r.next(stopKey{opaque: op, extra: spaceLT, b: closer}, l.a)
		if stop < len(text) && text[stop] == closer {
			return stop
		}
	}
	return -1
}

// gfmStarts reports whether GFM's extended autolinks start a link at p: at the start of the text
// or a line, after white space, or after one of "*_~(".
func gfmStarts(text string, p int) bool {
	return p == 0 || strings.IndexByte(asciiSpace+"*_~(", text[p-1]) >= 0
}

// titleFollows reports whether the white space at i in a Markdown link destination is followed by
// a whole link title ('"..."', "'...'" or "(...)") and ")", which ends the destination there.
func (r *readers) titleFollows(i int) bool {
	text := r.text
	j := i
	for j < len(text) && j-i < maxLookahead && strings.IndexByte(asciiSpace, text[j]) >= 0 {
		j++
	}
	if j == len(text) || strings.IndexByte(`"'(`, text[j]) < 0 {
		return false
	}
	closer := text[j]
	if closer == '(' {
		closer = ')'
	}
	k := r.next(at(closer), j+1)
	if k == len(text) {
		return false
	}
	for k++; k < len(text) && k-i < maxLookahead && strings.IndexByte(asciiSpace, text[k]) >= 0; k++ {
	}
	return k < len(text) && text[k] == ')'
}

// ownReading is a reading and the length of the authority it read (after a sentence cut).
type ownReading struct {
	Reading
	authLen int
}

// read reads the link's authority text[l.a:e].
func (r *readers) read(l link, e int, stopSet string) ownReading {
	if e-l.a > maxAuthority {
		return ownReading{Reading{Unreadable: true}, e - l.a}
	}
	auth := r.text[l.a:e]
	if e == len(r.text) || strings.IndexByte(stopSet, r.text[e]) < 0 {
		auth = sentenceCut(auth)
	}
	return ownReading{webHost(l.prefix, auth, l.plain), len(auth)}
}

// webHost is the reading of the URL prefix+auth, auth being its whole authority. A plain ASCII
// name of a special scheme after any user info is read without the parser, as the parser reads
// it (see plainHost); user info never makes the parser fail.
func webHost(prefix, auth string, plain bool) Reading {
	at := strings.LastIndexByte(auth, '@')
	userInfo := at >= 0
	if plain {
		if h, ok := plainHost(auth[at+1:]); ok { // the host is what follows the last "@"
			return Reading{Host: h, UserInfo: userInfo}
		}
	}
	u, err := wurl.Parse(prefix + auth)
	if err != nil {
		return Reading{UserInfo: userInfo, Unreadable: true}
	}
	return Reading{Host: u.Hostname(), UserInfo: userInfo}
}

// plainHost reads an authority of ASCII letters, digits, hyphens and dots with an optional port,
// whose last label starts with a letter (so the parser's IPv4 reading does not apply) and that
// holds no punycode label: the parser's host is then that name in lower case.
func plainHost(auth string) (string, bool) {
	host := auth
	if k := strings.LastIndexByte(auth, ':'); k >= 0 {
		if !validPort(auth[k+1:]) {
			return "", false
		}
		host = auth[:k]
	}
	name := strings.TrimSuffix(host, ".")
	last := name[strings.LastIndexByte(name, '.')+1:]
	if last == "" || !isLetterByte(last[0]) {
		return "", false
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; !isAlnumByte(c) && c != '-' && c != '.' {
			return "", false
		}
	}
	h := strings.ToLower(host)
	if strings.Contains(h, "xn--") {
		return "", false
	}
	return h, true
}

// validPort reports whether the parser accepts p as a port: empty, or digits of a value up to
// 65535.
func validPort(p string) bool {
	p = strings.TrimLeft(p, "0")
	if len(p) > 5 || !allDigits(p) {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}

// sentenceCut ends a host where a sentence goes on after it without a space ("our-company.com.They
// sent"): when the host's last label is capitalised, letters only and no top-level domain, and the
// label before it is one (ICANN section of the public suffix list), the last label is cut. Only
// one label is cut, so a host that ends in two labels that are not top-level domains stays whole,
// and a host that ends in one (".Net") stays whole too: no reading that could open another host is
// dropped.
func sentenceCut(auth string) string {
	dot := strings.LastIndexByte(auth, '.')
	if dot <= 0 {
		return auth
	}
	last := auth[dot+1:]
	if last == "" || last[0] < 'A' || last[0] > 'Z' {
		return auth
	}
	for i := 1; i < len(last); i++ {
		if !isLetterByte(last[i]) {
			return auth
		}
	}
	head := auth[:dot]
	prev := head[strings.LastIndexByte(head, '.')+1:]
	if strings.ContainsAny(head, "@:") || icannTLD(strings.ToLower(last)) || !icannTLD(prev) {
		return auth
	}
	return head
}
