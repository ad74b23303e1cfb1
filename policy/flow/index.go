package flow

import (
	"net/mail"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow/scan"
	"github.com/promptgate/promptgate/policy/vet"
)

// Provenance compares values after a normalisation per kind (see docs/policy.md, "Provenance"): an
// email address and a host case-insensitively (hosts in IDNA ASCII form), a URL by its
// host or, with match "url", whole (scheme and host lowercased, default port and fragment dropped),
// an IBAN without separators in upper case, an id exactly, a text by its words, case-insensitively.
// Every comparison is of whole tokens: an item the scanners find whole, or a word sequence between
// non-word characters, so "bob@x.com" never matches inside "bob@x.com.evil.net", nor "x.com" inside
// "evilx.com", nor "77" inside "INV-77".

// index maps each normalised key to the sources it occurs in, as a bit mask over the distinct
// sources of the conversation (bit i for labels[i], bit 63 for every source after the 63rd). It
// covers the segments that some from list of the policy covers. It is built once per conversation,
// each part when a rule first needs it: the scanned items (addresses, hosts, URLs, IBANs), the id
// tokens, the words.
type index struct {
	c      *Conversation
	labels []Source
	number map[Source]int // each label's position in labels
	segBit []uint64       // per segment: its source's bit, 0 when the segment is not indexed
	// echo is, per tool output, the text of the arguments of the call it answers ("" for other
	// segments): what a tool echoes of its call came from the model, so it is not the output's
	// (see echoed), for provenance and for what learn mode sees alike.
	echo      []string
	echoWords [][]int32 // per segment: echo's words as numbers (-1 for a word no segment holds)

	itemsOnce                  sync.Once
	emails, hosts, urls, ibans map[string]uint64
	urlsOnce                   sync.Once
	idsOnce                    sync.Once
	ids                        map[string]uint64
	wordsOnce                  sync.Once
	wordIDs                    map[string]int32 // lowercased word -> its number
	wordSegs                   [][]int32        // per word number: the indexed segments that hold it, each once
	segWords                   [][]int32        // each indexed segment's words, as numbers
	// phraseSteps counts the word comparisons of text lookups, so tests can bound their work.
	phraseSteps atomic.Int64
	// lists are the policy's operator lists, each with its source's bit.
	lists []listRef

	masksMu sync.Mutex
	masks   map[maskKey]uint64 // see mask
}

// listRef is an operator list as a source of one conversation.
type listRef struct {
	bit  uint64
	list *compiledList
}

// maskKey is a pattern list of the policy (by its first element and length: compiled lists never
// change) and whether the mask is of an allowed set.
type maskKey struct {
	pats *srcPattern
	n    int
	all  bool
}

const overflowBit = 63

// bitOf returns the bit of a source, adding it to labels.
func (ix *index) bitOf(s Source) uint64 {
	i, ok := ix.number[s]
	if !ok {
		i = len(ix.labels)
		ix.labels = append(ix.labels, s)
		ix.number[s] = i
	}
	return 1 << min(i, overflowBit)
}

// idx returns the conversation's index, its sources numbered on first use.
func (c *Conversation) idx() *index {
	c.indexOnce.Do(func() {
		ix := &index{c: c, number: map[Source]int{}, segBit: make([]uint64, len(c.segments))}
		for si, seg := range c.segments {
			if seg.Text == "" {
				continue
			}
			for _, pat := range c.p.indexed {
				if pat.matches(seg.Source, c.trusted[si]) {
					ix.segBit[si] = ix.bitOf(seg.Source)
					break
				}
			}
		}
		for _, l := range c.p.lists {
			ix.lists = append(ix.lists, listRef{bit: ix.bitOf(Source{Kind: SourceList, Tool: l.name}), list: l})
		}
		ix.echo = c.echoes(ix.segBit)
		c.index = ix
	})
	return c.index
}

// echoes returns, per indexed tool output, the text of the arguments of the call it answers (keys
// and string values), "" elsewhere or when the call is not known.
func (c *Conversation) echoes(segBit []uint64) []string {
	var args map[string][]byte
	echo := make([]string, len(c.segments))
	for si, seg := range c.segments {
		if segBit[si] == 0 || seg.Source.Kind != SourceTool && seg.Source.Kind != SourceMCP {
			continue
		}
		if seg.callArgs != nil && gjson.ValidBytes(seg.callArgs) {
			echo[si] = JSONStrings(gjson.ParseBytes(seg.callArgs), true, maxCollectDepth, nil)
			continue
		}
		if seg.callID == "" {
			continue
		}
		if args == nil {
			args = map[string][]byte{}
			for _, h := range c.calls {
				if h.ID != "" && h.Args != nil {
					args[h.ID] = h.Args
				}
			}
		}
		if a, ok := args[seg.callID]; ok && gjson.ValidBytes(a) {
			echo[si] = JSONStrings(gjson.ParseBytes(a), true, maxCollectDepth, nil)
		}
	}
	return echo
}

// echoOf is segment si's echo ("" for an index without echoes: an operator list's).
func (ix *index) echoOf(si int) string {
	if si >= len(ix.echo) {
		return ""
	}
	return ix.echo[si]
}

// echoed returns the keys of one kind (keysOf) that segment si's echo holds, nil for none.
func (ix *index) echoed(si int, keysOf func(text string) []string) map[string]bool {
	e := ix.echoOf(si)
	if e == "" {
		return nil
	}
	out := map[string]bool{}
	for _, k := range keysOf(e) {
		out[k] = true
	}
	return out
}

// items builds the maps of scanned items.
func (ix *index) items() {
	ix.itemsOnce.Do(func() {
		ix.emails, ix.hosts, ix.ibans = map[string]uint64{}, map[string]uint64{}, map[string]uint64{}
		for si, seg := range ix.c.segments {
			bit := ix.segBit[si]
			if bit == 0 {
				continue
			}
			it := ix.c.memo.itemsOf(seg.Text)
			var echo *textItems
			if e := ix.echoOf(si); e != "" {
				echo = ix.c.memo.itemsOf(e)
			}
			add := func(m map[string]uint64, keys []string, echoed func(*textItems) []string) {
				var skip map[string]bool
				if echo != nil {
					skip = ix.echoed(si, func(string) []string { return echoed(echo) })
				}
				for _, k := range keys {
					if !skip[k] {
						m[k] |= bit
					}
				}
			}
			add(ix.hosts, it.hosts, func(e *textItems) []string { return e.hosts })
			add(ix.emails, it.emails, func(e *textItems) []string { return e.emails })
			add(ix.ibans, it.ibans, func(e *textItems) []string { return e.ibans })
		}
	})
}

// urlForms builds the map of the links' forms for match "url" (only a rule with match "url" needs
// them).
func (ix *index) urlForms() {
	ix.urlsOnce.Do(func() {
		ix.urls = map[string]uint64{}
		for si, seg := range ix.c.segments {
			if bit := ix.segBit[si]; bit != 0 {
				skip := ix.echoed(si, func(t string) []string { return ix.c.memo.itemsOf(t).urlKeys() })
				for _, k := range ix.c.memo.itemsOf(seg.Text).urlKeys() {
					if !skip[k] {
						ix.urls[k] |= bit
					}
				}
			}
		}
	})
}

// idTokens builds the map of id tokens.
func (ix *index) idTokens() {
	ix.idsOnce.Do(func() {
		ix.ids = map[string]uint64{}
		for si, seg := range ix.c.segments {
			if bit := ix.segBit[si]; bit != 0 {
				skip := ix.echoed(si, ix.c.memo.idsOf)
				for _, tok := range ix.c.memo.idsOf(seg.Text) {
					if !skip[tok] {
						ix.ids[tok] |= bit
					}
				}
			}
		}
	})
}

// wordIndex builds the word positions.
func (ix *index) wordIndex() {
	ix.wordsOnce.Do(func() {
		ix.wordIDs = map[string]int32{}
		ix.segWords = make([][]int32, len(ix.c.segments))
		for si, seg := range ix.c.segments {
			if ix.segBit[si] == 0 {
				continue
			}
			words := ix.c.memo.wordsOf(seg.Text)
			ids := make([]int32, len(words))
			for at, w := range words {
				id, ok := ix.wordIDs[w]
				if !ok {
					id = int32(len(ix.wordSegs))
					ix.wordIDs[w] = id
					ix.wordSegs = append(ix.wordSegs, nil)
				}
				ids[at] = id
				if segs := ix.wordSegs[id]; len(segs) == 0 || segs[len(segs)-1] != int32(si) {
					ix.wordSegs[id] = append(segs, int32(si))
				}
			}
			ix.segWords[si] = ids
		}
		ix.echoWords = make([][]int32, len(ix.c.segments))
		for si, e := range ix.echo {
			if e == "" {
				continue
			}
			for _, w := range ix.c.memo.wordsOf(e) {
				id, ok := ix.wordIDs[w]
				if !ok {
					id = -1
				}
				ix.echoWords[si] = append(ix.echoWords[si], id)
			}
		}
	})
}

// mask returns the bits of the sources that the patterns cover, worked out once per pattern list
// of the policy (the labels are many where many tools answered). With all set, the overflow bit is
// set only when every source past the 63rd is covered (an allowed set errs on the side of less);
// otherwise when any is (an excluded set errs on the side of more).
func (c *Conversation) mask(ix *index, pats []srcPattern, all bool) uint64 {
	if len(pats) == 0 {
		return c.coverMask(ix, pats, all)
	}
	key := maskKey{&pats[0], len(pats), all}
	ix.masksMu.Lock()
	defer ix.masksMu.Unlock()
	m, ok := ix.masks[key]
	if !ok {
		if ix.masks == nil {
			ix.masks = map[maskKey]uint64{}
		}
		m = c.coverMask(ix, pats, all)
		ix.masks[key] = m
	}
	return m
}

// coverMask works a mask out (see mask).
func (c *Conversation) coverMask(ix *index, pats []srcPattern, all bool) uint64 {
	var m uint64
	overflowAll, overflowAny := true, false
	for i, l := range ix.labels {
		hit := false
		for _, p := range pats {
			// The rest of an output trusted in part is never an allowed source, whatever names its
			// tool.
			if p.matches(l, c.p.trustedSource(l)) && !(all && l.Part == PartRest) {
				hit = true
				break
			}
		}
		if i < overflowBit {
			if hit {
				m |= 1 << i
			}
			continue
		}
		overflowAll = overflowAll && hit
		overflowAny = overflowAny || hit
	}
	if len(ix.labels) > overflowBit && (all && overflowAll || !all && overflowAny) {
		m |= 1 << overflowBit
	}
	return m
}

// labelsOf names the sources of a mask, for a reason.
func (ix *index) labelsOf(m uint64) string {
	var out []string
	for i, l := range ix.labels {
		if m&(1<<min(i, overflowBit)) != 0 {
			out = append(out, l.label())
		}
	}
	return strings.Join(out, ", ")
}

// lookupPhrase returns the sources whose text holds the words in sequence. It reads only the
// segments that hold the value's rarest word, each in one Knuth-Morris-Pratt pass, so its work is
// linear in those segments' words plus the value's, whatever either repeats.
func (ix *index) lookupPhrase(words []string) uint64 {
	if len(words) == 0 {
		return 0
	}
	pat := make([]int32, len(words))
	rare := int32(-1)
	for i, w := range words {
		id, ok := ix.wordIDs[w]
		if !ok {
			return 0
		}
		pat[i] = id
		if rare < 0 || len(ix.wordSegs[id]) < len(ix.wordSegs[rare]) {
			rare = id
		}
	}
	fail, steps := kmpTable(pat)
	var m uint64
	for _, si := range ix.wordSegs[rare] {
		bit := ix.segBit[si]
		if m&bit != 0 {
			continue // this source already holds the phrase
		}
		found, n := holdsPhrase(ix.segWords[si], pat, fail)
		steps += n
		if found && int(si) < len(ix.echoWords) && ix.echoWords[si] != nil {
			echoed, n := holdsPhrase(ix.echoWords[si], pat, fail) // the call gave it the phrase
			steps += n
			found = !echoed
		}
		if found {
			m |= bit
		}
	}
	ix.phraseSteps.Add(int64(steps))
	return m
}

// kmpTable is the Knuth-Morris-Pratt failure table of pat: fail[k] is the length of the longest
// proper prefix of pat[:k+1] that is also its suffix. steps counts its comparisons.
func kmpTable(pat []int32) (fail []int, steps int) {
	fail = make([]int, len(pat))
	k := 0
	for i := 1; i < len(pat); i++ {
		for {
			steps++
			if pat[i] == pat[k] {
				k++
				break
			}
			if k == 0 {
				break
			}
			k = fail[k-1]
		}
		fail[i] = k
	}
	return fail, steps
}

// holdsPhrase reports whether text holds pat as a contiguous run, with pat's failure table; steps
// counts its comparisons (at most twice len(text)).
func holdsPhrase(text, pat []int32, fail []int) (found bool, steps int) {
	k := 0
	for _, w := range text {
		for {
			steps++
			if w == pat[k] {
				k++
				break
			}
			if k == 0 {
				break
			}
			k = fail[k-1]
		}
		if k == len(pat) {
			return true, steps
		}
	}
	return false, steps
}

// splitWords returns the maximal runs of letters, digits and marks of s.
func splitWords(s string) []string {
	var words []string
	start := -1
	for i, r := range s {
		word := r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') ||
			r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r))
		switch {
		case word && start < 0:
			start = i
		case !word && start >= 0:
			words = append(words, s[start:i])
			start = -1
		}
	}
	if start >= 0 {
		words = append(words, s[start:])
	}
	return words
}

// forIDTokens calls fn for each id token of s: the runs between white space, quotes, brackets,
// commas, semicolons and pipes, without leading and trailing '.', ':', '!' and '?'; a token that
// starts with '#' or '@' (a channel, a mention) is given without it too.
func forIDTokens(s string, fn func(string)) {
	start := -1
	emit := func(end int) {
		tok := strings.Trim(s[start:end], ".:!?")
		if tok == "" {
			return
		}
		fn(tok)
		if bare := strings.TrimLeft(tok, "#@"); bare != tok && bare != "" {
			fn(bare)
		}
	}
	for i, r := range s {
		sep := unicode.IsSpace(r) || strings.ContainsRune("\"'`<>()[]{},;|", r) || unicode.IsControl(r)
		switch {
		case !sep && start < 0:
			start = i
		case sep && start >= 0:
			emit(i)
			start = -1
		}
	}
	if start >= 0 {
		emit(len(s))
	}
}

// readingHost is the normalised host of one reading of a URL item.
func readingHost(rd scan.Reading) (string, bool) {
	if rd.Unreadable || rd.Host == "" {
		return "", false
	}
	h, err := vet.NormHost(rd.Host)
	return h, err == nil
}

// emailKey normalises an address as net/mail gives it (local@domain, the local part unquoted): the
// local part lowercased, the domain as NormHost makes it.
func emailKey(s string) (string, bool) {
	at := strings.LastIndexByte(s, '@')
	if at <= 0 {
		return "", false
	}
	h, err := vet.NormHost(s[at+1:])
	if err != nil {
		return "", false
	}
	return strings.ToLower(s[:at]) + "@" + h, true
}

// itemEmailKey normalises an address found in text. A quoted local part, and the white space and
// comments RFC 5322 allows after the "@", are read by net/mail ('"bob@acme.com"@evil.net' is the
// local part bob@acme.com at evil.net; "bob@ (x) acme.com" is bob@acme.com).
func itemEmailKey(text string, it scan.Item) (string, bool) {
	if it.Malformed {
		return "", false
	}
	s := it.Text(text)
	if strings.HasPrefix(s, `"`) || strings.ContainsAny(s, " \t\r\n(") {
		a, err := mail.ParseAddress(s)
		if err != nil {
			return "", false
		}
		s = a.Address
	}
	return emailKey(s)
}

// itemURL is a URL item's form for match "url" (see canonicalURL), when every reader reads it
// alike.
func itemURL(text string, it scan.Item) (string, bool) {
	if len(it.Alt) > 0 {
		return "", false
	}
	return canonicalURL(it.Text(text))
}

// canonicalURL is a URL's form for match "url": scheme (https when none is written) and host
// lowercased, host in IDNA ASCII form, a default port dropped, the path ("/" when empty) and query
// as written, the fragment dropped. A URL with user info, or one a browser reads with another host
// (see vet.ReadURL), has none.
func canonicalURL(s string) (string, bool) {
	v, why := vet.ReadURL(s)
	if why != "" {
		return "", false
	}
	u, h, scheme := v.URL, v.Host, v.Scheme
	port := u.Port()
	if scheme == "https" && port == "443" || scheme == "http" && port == "80" {
		port = ""
	}
	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	if strings.Contains(h, ":") {
		b.WriteString("[" + h + "]")
	} else {
		b.WriteString(h)
	}
	if port != "" {
		b.WriteString(":" + port)
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	b.WriteString(p)
	if u.RawQuery != "" || u.ForceQuery {
		b.WriteString("?" + u.RawQuery)
	}
	return b.String(), true
}

// valueKind is the normalised form of an argument value: which index to look in, and the key.
type valueKind uint8

const (
	vkEmail valueKind = iota + 1
	vkHost
	vkURL
	vkIBAN
	vkID
	vkText
)

// normalise reads one argument value as kind as (auto chooses by its shape): the index to look
// in and the keys to look up (several for a list of addresses, each of which must pass); why is set
// when the value is not of that kind. URLs must have one of schemes. Reasons hold no part of the
// value.
func normalise(v gjson.Result, as string, matchURL bool, schemes map[string]bool) (kind valueKind, keys []string, words []string, why string) {
	if v.Type == gjson.Number {
		switch as {
		case AsAuto, AsID:
			return vkID, []string{v.Raw}, nil, ""
		case AsText:
			return vkText, []string{""}, []string{v.Raw}, ""
		}
		return 0, nil, nil, "is a number, not " + article(as)
	}
	if v.Type != gjson.String {
		return 0, nil, nil, "is not a string or a number"
	}
	s := v.Str
	if as == AsAuto {
		as = autoKind(s)
	}
	switch as {
	case AsEmail:
		keys, why := addressKeys(s)
		return vkEmail, keys, nil, why
	case AsHost:
		h, err := vet.NormHost(s)
		if err != nil || strings.ContainsAny(h, "/@: ") && !strings.Contains(h, "::") {
			return 0, nil, nil, "is not a host name"
		}
		return vkHost, []string{h}, nil, ""
	case AsURL:
		key, why := urlKey(s, matchURL, schemes)
		if why != "" {
			return 0, nil, nil, why
		}
		if matchURL {
			return vkURL, []string{key}, nil, ""
		}
		return vkHost, []string{key}, nil, ""
	case AsIBAN:
		it, ok := scan.Whole(s, scan.IBAN)
		if !ok {
			return 0, nil, nil, "is not a valid IBAN"
		}
		return vkIBAN, []string{it.Value}, nil, ""
	case AsID:
		if s == "" || strings.IndexFunc(s, unicode.IsSpace) >= 0 {
			return 0, nil, nil, "is not an id (empty, or holds white space)"
		}
		return vkID, []string{s}, nil, ""
	}
	words = splitWords(strings.ToLower(s))
	if len(words) == 0 {
		return 0, nil, nil, "holds no words"
	}
	return vkText, []string{""}, words, ""
}

// autoKind is the kind auto reads a string value as: the first kind the whole value is.
func autoKind(s string) string {
	switch {
	case isIBANValue(s):
		return AsIBAN
	case isWhole(s, scan.Email), strings.IndexByte(s, '@') >= 0 && isAddressList(s):
		return AsEmail
	case isWhole(s, scan.URL):
		return AsURL
	case strings.IndexFunc(s, unicode.IsSpace) < 0:
		return AsID
	}
	return AsText
}

// isAddressList reports whether net/mail reads s as a list of addresses and the scanner finds an
// address in it ("Bob <bob@x.com>", "bob@x.com, carol@y.org"; not "ref@v2", which has no domain
// the scanner takes for one).
func isAddressList(s string) bool {
	l, err := mail.ParseAddressList(s)
	return err == nil && len(l) > 0 && len(scan.Find(s, scan.Email)) > 0
}

// addressKeys reads a value of addresses as RFC 5322 does (net/mail: display names, comments,
// quoted local parts, a list of addresses) and checks that the scanner finds exactly the same
// addresses in it: where the two readers disagree (an address hidden in a display name or a
// comment, a domain the scanner does not read), the value is refused.
func addressKeys(s string) ([]string, string) {
	list, err := mail.ParseAddressList(s)
	if err != nil || len(list) == 0 {
		return nil, "is not an email address"
	}
	var keys []string
	for _, a := range list {
		k, ok := emailKey(a.Address)
		if !ok {
			return nil, "has an invalid domain"
		}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var found []string
	for _, it := range scan.Find(s, scan.Email) {
		k, ok := itemEmailKey(s, it)
		if !ok {
			return nil, "holds an address that cannot be read"
		}
		if !slices.Contains(found, k) {
			found = append(found, k)
		}
	}
	slices.Sort(found)
	sorted := slices.Sorted(slices.Values(keys))
	if !slices.Equal(found, sorted) {
		return nil, "is read as other addresses by a mail parser (readers disagree)"
	}
	return keys, ""
}

// urlKey reads a URL value: its host, or its canonical form with match "url" (see canonicalURL).
func urlKey(s string, matchURL bool, schemes map[string]bool) (string, string) {
	v, why := vet.ReadURL(s)
	switch {
	case v.URL == nil:
		return "", "is not a URL"
	case !schemes[v.Scheme]:
		return "", "has a scheme that is not allowed"
	case why == "has no host":
		return "", "is not a URL"
	case why != "":
		return "", why
	case matchURL:
		if c, ok := canonicalURL(s); ok {
			return c, ""
		}
		return "", "is not a URL"
	}
	return v.Host, ""
}

func article(as string) string {
	switch as {
	case AsEmail:
		return "an email address"
	case AsIBAN:
		return "an IBAN"
	case AsURL:
		return "a URL"
	}
	return "a " + as
}

func isWhole(s string, k scan.Kind) bool {
	_, ok := scan.Whole(s, k)
	return ok
}

// isIBANValue reports whether a whole value is one IBAN (grouped or not).
func isIBANValue(s string) bool {
	_, ok := scan.Whole(s, scan.IBAN)
	return ok
}

// lookup returns the sources where a normalised value occurs: the conversation's and the operator's
// lists.
func (ix *index) lookup(kind valueKind, key string, words []string) uint64 {
	m := ix.lookupOwn(kind, key, words)
	for _, l := range ix.lists {
		if m&l.bit == 0 && l.list.ix.lookupOwn(kind, key, words) != 0 {
			m |= l.bit
		}
	}
	return m
}

// lookupOwn returns the sources of the index's own segments where a normalised value occurs.
func (ix *index) lookupOwn(kind valueKind, key string, words []string) uint64 {
	switch kind {
	case vkEmail:
		ix.items()
		return ix.emails[key]
	case vkHost:
		ix.items()
		return ix.hosts[key]
	case vkURL:
		ix.urlForms()
		return ix.urls[key]
	case vkIBAN:
		ix.items()
		return ix.ibans[key]
	case vkID:
		ix.idTokens()
		return ix.ids[key]
	case vkText:
		ix.wordIndex()
		return ix.lookupPhrase(words)
	}
	return 0
}

// itemKeys normalises an item a scan rule found, for a lookup: an address, an IBAN, a URL by the
// host of each of its readings, or whole.
func itemKeys(text string, it scan.Item, matchURL bool) (valueKind, []string, bool) {
	switch it.Kind {
	case scan.Email:
		k, ok := itemEmailKey(text, it)
		return vkEmail, []string{k}, ok
	case scan.IBAN:
		return vkIBAN, []string{it.Value}, true
	}
	if matchURL {
		u, ok := itemURL(text, it)
		return vkURL, []string{u}, ok
	}
	var keys []string
	for _, rd := range it.Readings() {
		h, ok := readingHost(rd)
		if !ok {
			return vkHost, nil, false
		}
		if !slices.Contains(keys, h) {
			keys = append(keys, h)
		}
	}
	return vkHost, keys, true
}

// itemName names a found item for a reason: "link 2 at offset 14".
func itemName(it scan.Item, n int) string {
	name := "link"
	switch it.Kind {
	case scan.Email:
		name = "address"
	case scan.IBAN:
		name = "IBAN"
	}
	return name + " " + strconv.Itoa(n) + " at offset " + strconv.Itoa(it.Start)
}
