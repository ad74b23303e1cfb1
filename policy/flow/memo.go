package flow

import (
	"strings"
	"sync"

	"github.com/promptgate/promptgate/policy/flow/scan"
	"github.com/promptgate/promptgate/policy/vet"
)

// textMemo keeps what an index reads of each text of one transcript — the keys of the items the
// scanners find, the id tokens, the words — so that the conversations read from that transcript
// (the protocol's, a version's in shadow, learn mode's) read each text once. A nil memo keeps
// nothing. It is safe for concurrent use.
type textMemo struct {
	mu    sync.Mutex
	items map[string]*textItems
	ids   map[string][]string
	words map[string][]string
}

// textItems are the normalised keys of the items found in one text; the URLs' forms for match "url"
// are made when a lookup first needs them (urlKeys).
type textItems struct {
	text                 string
	found                []scan.Item
	emails, hosts, ibans []string
	urlsOnce             sync.Once
	urls                 []string
}

// urlKeys are the forms for match "url" of the text's links that every reader reads alike.
func (t *textItems) urlKeys() []string {
	t.urlsOnce.Do(func() {
		for _, it := range t.found {
			if it.Kind != scan.URL {
				continue
			}
			if u, ok := itemURL(t.text, it); ok {
				t.urls = append(t.urls, u)
			}
		}
	})
	return t.urls
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

// findItems scans text: every host a link's readings give, every address and its domain, every
// IBAN.
func findItems(text string) *textItems {
	out := &textItems{text: text, found: scan.Find(text, scan.All)}
	for _, it := range out.found {
		switch it.Kind {
		case scan.URL:
			for _, rd := range it.Readings() {
				if h, ok := readingHost(rd); ok {
					out.hosts = append(out.hosts, h)
				}
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
