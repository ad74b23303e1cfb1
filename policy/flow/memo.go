package flow

import (
	"strings"
	"sync"

	"github.com/promptgate/promptgate/policy/flow/scan"
	"github.com/promptgate/promptgate/policy/vet"
)

// textMemo keeps what an index reads of each text of one transcript — the keys of the items the scanners
// find, the id tokens, the words — so that the conversations read from that transcript (the protocol's, a
// version's in shadow, learn mode's) read each text once. A nil memo keeps nothing. It is safe for
// concurrent use.
type textMemo struct {
	mu    sync.Mutex
	items map[string]*textItems
	ids   map[string][]string
	words map[string][]string
}

// textItems are the normalised keys of the items found in one text.
type textItems struct {
	emails, hosts, urls, ibans []string
}

// itemsOf returns the keys of the items found in text.
func (m *textMemo) itemsOf(text string) *textItems {
	if m == nil {
		return findItems(text)
	}
	m.mu.Lock()
	it, ok := m.items[text]
	m.mu.Unlock()
	if ok {
		return it
	}
	it = findItems(text)
	m.mu.Lock()
	if m.items == nil {
		m.items = map[string]*textItems{}
	}
	m.items[text] = it
	m.mu.Unlock()
	return it
}

// findItems scans text: every host a link's readings give, its form for match "url", every address and its
// domain, every IBAN.
func findItems(text string) *textItems {
	out := &textItems{}
	for _, it := range scan.Find(text, scan.All) {
		switch it.Kind {
		case scan.URL:
			for _, rd := range it.Readings() {
				if h, ok := readingHost(rd); ok {
					out.hosts = append(out.hosts, h)
				}
			}
			if u, ok := itemURL(text, it); ok {
				out.urls = append(out.urls, u)
			}
		case scan.Email:
			if k, ok := itemEmailKey(text, it); ok {
				out.emails = append(out.emails, k)
				if h, err := vet.NormHost(it.Host); err == nil {
					out.hosts = append(out.hosts, h)
				}
			}
		case scan.IBAN:
			out.ibans = append(out.ibans, it.Value)
		}
	}
	return out
}

// idsOf returns the id tokens of text.
func (m *textMemo) idsOf(text string) []string {
	if m == nil {
		return idTokensOf(text)
	}
	return memoized(&m.mu, &m.ids, text, idTokensOf)
}

func idTokensOf(text string) []string {
	var out []string
	forIDTokens(text, func(tok string) { out = append(out, tok) })
	return out
}

// wordsOf returns the words of text, lowercased.
func (m *textMemo) wordsOf(text string) []string {
	if m == nil {
		return lowerWords(text)
	}
	return memoized(&m.mu, &m.words, text, lowerWords)
}

func lowerWords(text string) []string { return splitWords(strings.ToLower(text)) }

// memoized returns read(text), kept in *cache (guarded by mu).
func memoized(mu *sync.Mutex, cache *map[string][]string, text string, read func(string) []string) []string {
	mu.Lock()
	v, ok := (*cache)[text]
	mu.Unlock()
	if ok {
		return v
	}
	v = read(text)
	mu.Lock()
	if *cache == nil {
		*cache = map[string][]string{}
	}
	(*cache)[text] = v
	mu.Unlock()
	return v
}
