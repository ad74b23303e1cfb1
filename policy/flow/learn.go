package flow

import (
	"slices"
	"strings"
	"sync"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow/scan"
	"github.com/promptgate/promptgate/policy/vet"
)

// Learn mode: where each argument value of a call occurred in the conversation (the sources
// provenance reads, and for a tool's output the field that held it), and what the scanners find in
// it — read with the same index and the same normalisation as the provenance and scan rules, so
// that a rule proposed from what was learned judges the values as they were learned.

// Learn limits.
const (
	// MaxLearnedValues bounds the argument values of one call that Origins reads.
	MaxLearnedValues = 64
	// maxFieldLabels bounds the fields of one tool's outputs told apart; values of the others have
	// no field.
	maxFieldLabels = overflowBit
)

// Origin is where one argument value of a call occurred, never the value itself.
type Origin struct {
	// Path is the value's path in the arguments as a gjson path, "#" for each element of an array;
	// Keys are its object keys in order (the caller decides which it may keep).
	Path string
	Keys []string
	// Kind is how a provenance rule with as "auto" reads the value: email, url, iban, id or text;
	// "number" for a number (read as an id); "" for a value no rule reads (true, false, null, an
	// empty string).
	Kind string
	// Sources are where the value occurs: user, app, context, list:NAME, tool:NAME, mcp:SERVER or
	// tool:?; empty when nowhere.
	Sources []Seen
	// Items are what the scanners find in a string value.
	Items []Found
}

// Seen is one source of a value: its label and, for a tool's or an MCP server's output that is a
// JSON or YAML document, the path of the field that holds it ("#.iban"; "" when not known).
type Seen struct {
	Source string
	Field  string
}

// Found is one item the scanners find in a value: the host of a link (in every reading), the domain
// of an address, or the country of an IBAN.
type Found struct {
	// Kind is "host", "domain" or "iban_country".
	Kind string
	Name string
}

// Kinds of Found.
const (
	FoundHost    = "host"
	FoundDomain  = "domain"
	FoundCountry = "iban_country"
)

// Learning returns a policy that reads a conversation for learn mode: every source indexed, the
// operator lists of p (nil: none) kept, no tool output trusted or split. Its conversations judge no
// call.
func (p *Policy) Learning() *Policy {
	lp := &Policy{ttl: DefaultConfirmTTL, rounds: DefaultContinueRounds, indexed: []srcPattern{
		{kind: patUser}, {kind: patApp}, {kind: patContext}, {kind: patUnknownTool}, {kind: patTrusted},
		{kind: patTool, glob: "*"}, {kind: patMCP, glob: "*"},
	}}
	if p != nil {
		lp.lists = p.lists
	}
	return lp
}

// Origins reads the values of a call's arguments (a JSON object): where each occurred in the
// conversation, and what the scanners find in it; at most MaxLearnedValues values, depth first. It
// is safe for concurrent use; arguments that are not a JSON object give none.
func (c *Conversation) Origins(args []byte) []Origin {
	root := gjson.ParseBytes(args)
	if !gjson.ValidBytes(args) || !root.IsObject() {
		return nil
	}
	var out []Origin
	var walk func(v gjson.Result, path string, keys []string, depth int)
	walk = func(v gjson.Result, path string, keys []string, depth int) {
		if len(out) >= MaxLearnedValues || depth > maxCollectDepth {
			return
		}
		switch {
		case v.IsObject():
			v.ForEach(func(k, e gjson.Result) bool {
				walk(e, joinPath(path, escapeKey(k.Str)), append(slices.Clip(keys), k.Str), depth+1)
				return len(out) < MaxLearnedValues
			})
		case v.IsArray():
			v.ForEach(func(_, e gjson.Result) bool {
				walk(e, joinPath(path, "#"), keys, depth+1)
				return len(out) < MaxLearnedValues
			})
		default:
			out = append(out, c.origin(v, path, keys))
		}
	}
	walk(root, "", nil, 0)
	return out
}

// origin reads one value.
func (c *Conversation) origin(v gjson.Result, path string, keys []string) Origin {
	o := Origin{Path: path, Keys: keys}
	if v.Type != gjson.String && v.Type != gjson.Number {
		return o
	}
	if v.Type == gjson.String {
		o.Items = found(v.Str)
	}
	vk, ks, words, why := normalise(v, AsAuto, false, map[string]bool{"http": true, "https": true})
	if why != "" {
		return o
	}
	o.Kind = kindName(vk)
	if v.Type == gjson.Number {
		o.Kind = "number"
	}
	ix := c.idx()
	var m uint64
	for i, k := range ks {
		w := ix.lookup(vk, k, words)
		if i == 0 {
			m = w
		} else {
			m &= w // every address of a list
		}
	}
	for i, l := range ix.labels {
		if i >= overflowBit || m&(1<<i) == 0 {
			continue // a source past the 63rd is not told apart
		}
		s := Seen{Source: l.String()}
		if l.Kind == SourceTool && l.Tool != "" || l.Kind == SourceMCP {
			s.Field = c.fieldOf(l, vk, ks, words)
		}
		o.Sources = append(o.Sources, s)
	}
	return o
}

// kindName names a value kind as a provenance rule's as does.
func kindName(k valueKind) string {
	switch k {
	case vkEmail:
		return AsEmail
	case vkHost, vkURL:
		return AsURL
	case vkIBAN:
		return AsIBAN
	case vkID:
		return AsID
	}
	return AsText
}

// found lists what the scanners find in text: hosts of links (every reading), domains of addresses,
// countries of IBANs, each once.
func found(text string) []Found {
	var out []Found
	add := func(f Found) {
		if f.Name != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	for _, it := range scan.Find(text, scan.All) {
		switch it.Kind {
		case scan.URL:
			for _, rd := range it.Readings() {
				if h, ok := readingHost(rd); ok {
					add(Found{Kind: FoundHost, Name: h})
				}
			}
		case scan.Email:
			if h, err := vet.NormHost(it.Host); err == nil && !it.Malformed {
				add(Found{Kind: FoundDomain, Name: h})
			}
		case scan.IBAN:
			if len(it.Value) >= 2 {
				add(Found{Kind: FoundCountry, Name: it.Value[:2]})
			}
		}
	}
	return out
}

// fieldIndexes holds, per tool or MCP source, the index of its outputs' fields (see fieldOf).
type fieldIndexes struct {
	mu sync.Mutex
	m  map[Source]*index
}

// fieldOf is the field of the outputs of source src where the value occurs: the path of the first
// field, in document order, that holds it; "" when none does or the outputs are not documents.
func (c *Conversation) fieldOf(src Source, vk valueKind, keys, words []string) string {
	ix := c.fieldIndex(src)
	if ix == nil {
		return ""
	}
	var m uint64
	for i, k := range keys {
		w := ix.lookupOwn(vk, k, words)
		if i == 0 {
			m = w
		} else {
			m &= w
		}
	}
	for i, l := range ix.labels {
		if i < overflowBit && m&(1<<i) != 0 {
			return l.Tool
		}
	}
	return ""
}

// fieldIndex indexes the fields of every output of src in the conversation: one segment per string
// or number of its document, labelled by the field's path ('#' for each element), keys of more than
// plain letters, digits, '_' and '-' left out. Made once per source.
func (c *Conversation) fieldIndex(src Source) *index {
	c.fields.mu.Lock()
	defer c.fields.mu.Unlock()
	if ix, ok := c.fields.m[src]; ok {
		return ix
	}
	if c.fields.m == nil {
		c.fields.m = map[Source]*index{}
	}
	fc := &Conversation{p: c.p}
	seen := map[int]bool{}
	for _, seg := range c.segments {
		if seg.Source.Kind != src.Kind || seg.Source.Tool != src.Tool || seg.Doc == "" || seen[seg.Message] && seg.Message >= 0 {
			continue
		}
		seen[seg.Message] = true
		js, problem := documentJSON(seg.Doc)
		if problem != "" {
			continue
		}
		leaves(gjson.Parse(js), "", 0, func(path, text string) {
			fc.segments = append(fc.segments, Segment{Source: Source{Kind: SourceTool, Tool: path}, Text: text, Message: -1})
		})
	}
	var ix *index
	if len(fc.segments) > 0 {
		ix = &index{c: fc, number: map[Source]int{}, segBit: make([]uint64, len(fc.segments))}
		for i, seg := range fc.segments {
			if len(ix.labels) >= maxFieldLabels {
				if _, ok := ix.number[seg.Source]; !ok {
					continue
				}
			}
			ix.segBit[i] = ix.bitOf(seg.Source)
		}
	}
	c.fields.m[src] = ix
	return ix
}

// leaves calls fn with the path and text of every string and number of a document.
func leaves(v gjson.Result, path string, depth int, fn func(path, text string)) {
	if depth > maxFieldDepth {
		return
	}
	switch {
	case v.Type == gjson.String:
		fn(path, v.Str)
	case v.Type == gjson.Number:
		fn(path, v.Raw)
	case v.IsArray():
		v.ForEach(func(_, e gjson.Result) bool {
			leaves(e, joinPath(path, "#"), depth+1, fn)
			return true
		})
	case v.IsObject():
		v.ForEach(func(k, e gjson.Result) bool {
			if PlainKey(k.Str) {
				leaves(e, joinPath(path, k.Str), depth+1, fn)
			}
			return true
		})
	}
}

// PlainKey reports whether an object key is 1 to 64 letters, digits, '_' and '-': a name that learn
// mode may keep in a path, and that needs no escaping in a gjson path.
func PlainKey(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// joinPath appends one step to a gjson path.
func joinPath(path, step string) string {
	if path == "" {
		return step
	}
	return path + "." + step
}

// escapeKey escapes a key for a gjson path (its special characters behind a backslash).
func escapeKey(k string) string {
	if PlainKey(k) {
		return k
	}
	var b strings.Builder
	for _, r := range k {
		if strings.ContainsRune(`.*?|#@\!=<>%"[]{}()`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// HistoryCount is how many calls of tool the conversation made before this request (a tool's calls
// per conversation, for learn mode's budgets).
func (c *Conversation) HistoryCount(tool string) int {
	n := 0
	for _, h := range c.calls {
		if h.Tool == tool {
			n++
		}
	}
	return n
}

// Key is the id that tells the conversation apart from others (the client's conversation id, else a
// digest of its first user message, bound to the user): "" when it cannot be told (part of its
// history unseen and no id). It holds no message text.
func (c *Conversation) Key() string { return c.memKey }
