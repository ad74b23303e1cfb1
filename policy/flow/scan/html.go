package scan

import (
	"html"
	"sort"
	"strings"
)

// view is the text as a browser reads it: character references decoded, a full-width or small
// commercial at read as "@" (as a person who retypes "eve＠evil.net" does), the ASCII percent-escapes
// of a mailto: URL decoded (as the mail program it opens reads them: "mailto:eve%40evil.net"), a
// Markdown renderer's
// backslash escapes of ASCII punctuation undone ("acme.com\@evil.net" is rendered and linked as
// "acme.com@evil.net", in a destination too), and ASCII tabs and line breaks removed inside the
// quoted attribute values of tags and inside Markdown link destinations (the URL parser drops
// them; a renderer decodes the references of a destination). pieces map its bytes back to the
// text.
type view struct {
	text   string
	pieces []piece
}

// piece is a run of the view from offset at: literal bytes of the text from from, or (ref) one
// character reference, text[from:to].
type piece struct {
	at, from, to int
	ref          bool
}

// decodedView returns the browser's view of text, false when it is the text itself.
func decodedView(text string) (view, bool) {
	if strings.IndexByte(text, '&') < 0 && strings.IndexByte(text, '\\') < 0 && strings.IndexByte(text, '%') < 0 &&
		!strings.Contains(text, "\uff20") && !strings.Contains(text, "\ufe6b") &&
		(strings.IndexByte(text, '<') < 0 || !strings.ContainsAny(text, "\t\n\r")) {
		return view{}, false
	}
	var b strings.Builder
	var pieces []piece
	changed := false
	lit := -1 // start of the literal run being copied
	flush := func(end int) {
		if lit >= 0 && end > lit {
			pieces = append(pieces, piece{at: b.Len(), from: lit, to: end})
			b.WriteString(text[lit:end])
		}
		lit = -1
	}
	inTag := false
	var quote byte  // the quote of the attribute value being read, 0 outside one
	var last byte   // the last byte of the tag outside white space
	var dest byte   // the closer of the Markdown link destination being read ("]("), 0 outside one
	mailto := false // inside a mailto: URL, whose percent-escapes a mail program decodes (RFC 6068)
	for i := 0; i < len(text); {
		c := text[i]
		if c == 'm' || c == 'M' {
			mailto = mailto || len(text)-i > 7 && strings.EqualFold(text[i:i+7], "mailto:")
		} else if mailto && (c <= ' ' || strings.IndexByte("\"<>", c) >= 0) {
			mailto = false
		}
		if c == 0xef && i+2 < len(text) && (text[i+1:i+3] == "\xbc\xa0" || text[i+1:i+3] == "\xb9\xab") {
			flush(i) // U+FF20 or U+FE6B: a commercial at as a person reads it (NFKC)
			pieces = append(pieces, piece{at: b.Len(), from: i, to: i + 3, ref: true})
			b.WriteByte('@')
			changed = true
			i += 3
			continue
		}
		switch {
		case mailto && c == '%' && i+2 < len(text) && unhex(text[i+1]) >= 0 && unhex(text[i+2]) >= 0 && text[i+1] < '8':
			flush(i)
			pieces = append(pieces, piece{at: b.Len(), from: i, to: i + 3, ref: true})
			b.WriteByte(byte(unhex(text[i+1])<<4 | unhex(text[i+2])))
			changed = true
			i += 3
			continue
		case c == '\\' && i+1 < len(text) && isASCIIPunct(text[i+1]):
			flush(i)
			pieces = append(pieces, piece{at: b.Len(), from: i, to: i + 2, ref: true})
			b.WriteByte(text[i+1])
			changed = true
			i += 2
			continue
		case c == '&':
			if n := refLen(text[i:]); n > 0 {
				d := html.UnescapeString(text[i : i+n])
				if quote != 0 || dest != 0 {
					d = strings.Map(dropURLSpace, d)
				}
				if d != text[i:i+n] {
					flush(i)
					pieces = append(pieces, piece{at: b.Len(), from: i, to: i + n, ref: true})
					b.WriteString(d)
					changed = true
					i += n
					continue
				}
			}
		case (quote != 0 || dest == '>') && (c == '\t' || c == '\n' || c == '\r'):
			flush(i)
			changed = true
			i++
			continue
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case dest != 0:
			if c == dest || dest == ')' && (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
				dest = 0
			}
		case c == '(' && i > 0 && text[i-1] == ']' && !inTag:
			dest = ')'
			if i+1 < len(text) && text[i+1] == '<' {
				dest = '>'
			}
		case c == '<':
			inTag = i+1 < len(text) && isLetterByte(text[i+1])
		case !inTag:
		case c == '>':
			inTag = false
		case (c == '"' || c == '\'') && last == '=':
			quote = c
		}
		if inTag && quote == 0 && c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' {
			last = c
		}
		if lit < 0 {
			lit = i
		}
		i++
	}
	flush(len(text))
	if !changed {
		return view{}, false
	}
	return view{text: b.String(), pieces: pieces}, true
}

// unhex is the value of the hexadecimal digit c, -1 for another byte.
func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// isASCIIPunct reports whether c is one of the ASCII punctuation characters CommonMark lets a
// backslash escape.
func isASCIIPunct(c byte) bool {
	return c > ' ' && c < 0x7f && !isAlnumByte(c)
}

// dropURLSpace removes the runes a URL parser drops: ASCII tab, line feed and carriage return.
func dropURLSpace(r rune) rune {
	if r == '\t' || r == '\n' || r == '\r' {
		return -1
	}
	return r
}

// refLen is the length of the character reference at the start of s ("&#x68;", "&#104", "&amp;",
// "&Tab;"), 0 when s does not start with one's form. Whether a named one exists is for
// html.UnescapeString to say.
func refLen(s string) int {
	i := 1
	if i < len(s) && s[i] == '#' {
		i++
		hex := i < len(s) && (s[i] == 'x' || s[i] == 'X')
		if hex {
			i++
		}
		d := i
		for i < len(s) && (isDigitByte(s[i]) || hex && (s[i] >= 'a' && s[i] <= 'f' || s[i] >= 'A' && s[i] <= 'F')) {
			i++
		}
		if i == d {
			return 0
		}
	} else {
		d := i
		for i < len(s) && isAlnumByte(s[i]) {
			i++
		}
		if i == d {
			return 0
		}
	}
	if i < len(s) && s[i] == ';' {
		i++
	}
	return i
}

// piece returns the piece that holds view offset k.
func (v view) piece(k int) piece {
	return v.pieces[sort.Search(len(v.pieces), func(i int) bool { return v.pieces[i].at > k })-1]
}

// mapItem turns an item of the view into one of text: Start and End cover the bytes it was read
// from, and Decoded holds it as read when that differs from them.
func (v view) mapItem(text string, it Item) Item {
	s, e := v.piece(it.Start), v.piece(it.End-1)
	w := v.text[it.Start:it.End]
	start, end := s.from, e.to
	if !s.ref {
		start += it.Start - s.at
	}
	if !e.ref {
		end = e.from + it.End - e.at
	}
	it.Start, it.End = start, end
	if w != text[start:end] {
		it.Decoded = w
	}
	return it
}
