package learn

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/vet"
)

// Defaults of SuggestOptions.
const (
	// DefaultMinCalls is the fewest calls of a tool or argument a rule is proposed from.
	DefaultMinCalls = 3
	// DefaultCoverage is the share of an argument's calls a provenance rule's sources must cover.
	DefaultCoverage = 0.9
	// DefaultMinHostConversations is the fewest conversations a host must be seen in to be listed.
	DefaultMinHostConversations = 2
)

// SuggestOptions tune Suggest; zero values are the defaults.
type SuggestOptions struct {
	MinCalls             int
	Coverage             float64
	MinHostConversations int
}

// Proposal is one change Suggest proposes, with its evidence: the calls (and conversations) it is
// drawn from, and those of the window it would have blocked.
type Proposal struct {
	// Kind is "allow", "onViolation", "provenance", "trustedPaths", "scan" or "budget".
	Kind string `json:"kind"`
	Tool string `json:"tool,omitempty"`
	Path string `json:"path,omitempty"`
	// Rule is the id of the rule proposed (provenance, scan, budget).
	Rule string `json:"rule,omitempty"`
	// Text says what the change is and why, in one line.
	Text       string `json:"text"`
	Evidence   Count  `json:"evidence"`
	WouldBlock Count  `json:"wouldBlock"`
}

// Suggestion is a proposed protocol version: the definition, ready to be edited, tested, shadowed
// and activated (it loads with `promptgate protocols push`), and its proposals.
type Suggestion struct {
	Protocol  string     `json:"protocol"`
	Version   int        `json:"basedOnVersion"`
	Learned   Learned    `json:"-"`
	Proposals []Proposal `json:"proposals"`
	// Definition is the proposed protocol definition (JSON).
	Definition []byte `json:"-"`
}

// ErrNothingLearned: the window holds no request of the protocol.
var ErrNothingLearned = errors.New("nothing learned")

// Suggest proposes a version of the protocol whose definition is body (version: its number) from
// what was learned of it: tools never called leave the allowlist; an argument whose values came
// from the user, the app, an operator list or a tool's field in DefaultCoverage of its calls gets a
// provenance rule (the field trusted through toolOutputs.trustedPaths); the hosts and domains found
// in an argument in at least DefaultMinHostConversations conversations become a scan rule's hosts;
// each tool gets a budget twice the most calls one conversation made; audit mode becomes refuse.
// Rules the definition has on the same tool and path are left as they are.
func Suggest(body []byte, version int, l Learned, o SuggestOptions) (Suggestion, error) {
	if o.MinCalls <= 0 {
		o.MinCalls = DefaultMinCalls
	}
	if o.Coverage <= 0 || o.Coverage > 1 {
		o.Coverage = DefaultCoverage
	}
	if o.MinHostConversations <= 0 {
		o.MinHostConversations = DefaultMinHostConversations
	}
	if _, err := policy.ParseProtocol(body); err != nil {
		return Suggestion{}, fmt.Errorf("learn: suggest: the active version: %w", err)
	}
	s := Suggestion{Protocol: l.Protocol, Version: version, Learned: l, Proposals: []Proposal{}}
	if l.Requests == 0 {
		return s, fmt.Errorf("learn: suggest %s: %w between %s and %s: learn mode runs where the protocol's onViolation is audit or a version of it is in shadow",
			l.Protocol, ErrNothingLearned, l.Since.Format("2006-01-02T15:04Z"), l.Until.Format("2006-01-02T15:04Z"))
	}
	b := &builder{body: body, root: gjson.ParseBytes(body), o: o, ids: existingIDs(body)}
	b.allowlist(l, &s)
	b.mode(&s)
	for _, t := range l.Tools {
		if t.Calls == 0 {
			continue
		}
		for _, a := range t.Args {
			b.provenance(t.Tool, a, &s)
			b.hosts(t.Tool, a, &s)
		}
		b.budget(t, &s)
	}
	if b.err != nil {
		return Suggestion{}, fmt.Errorf("learn: suggest: %w", b.err)
	}
	if _, err := policy.ParseProtocol(b.body); err != nil {
		return Suggestion{}, fmt.Errorf("learn: suggest: the proposal does not load: %w", err)
	}
	s.Definition = b.body
	return s, nil
}

// builder edits the definition with sjson, keeping every other field as written.
type builder struct {
	body []byte
	root gjson.Result // the definition as it was
	o    SuggestOptions
	ids  map[string]bool
	err  error
}

func (b *builder) set(path string, v any) {
	if b.err != nil {
		return
	}
	b.body, b.err = sjson.SetBytes(b.body, path, v)
}

// id is a rule id not used yet, from a base.
func (b *builder) id(base string) string {
	id := base
	for i := 2; b.ids[id]; i++ {
		id = base + "-" + strconv.Itoa(i)
	}
	b.ids[id] = true
	return id
}

func existingIDs(body []byte) map[string]bool {
	ids := map[string]bool{}
	for _, kind := range []string{"rules", "provenance", "scan", "budgets", "flows"} {
		gjson.GetBytes(body, "toolCalls."+kind+".#.id").ForEach(func(_, v gjson.Result) bool {
			ids[v.String()] = true
			return true
		})
	}
	return ids
}

// allowlist keeps in tools.allow what was called: names and globs that admit a called tool; "*"
// becomes the called tools by name. A tool offered and never called is reported as removed.
func (b *builder) allowlist(l Learned, s *Suggestion) {
	var called []string
	offered := map[string]int{}
	for _, t := range l.Tools {
		if t.Calls > 0 {
			called = append(called, t.Tool)
		}
		offered[t.Tool] = t.Offered
	}
	if len(called) == 0 {
		return
	}
	allow := b.root.Get("tools.allow")
	var old []string
	allow.ForEach(func(_, v gjson.Result) bool {
		old = append(old, v.String())
		return true
	})
	var keep []string
	for _, e := range old {
		if e == "*" {
			keep = append(keep, called...)
			continue
		}
		if slices.ContainsFunc(called, func(t string) bool { return globMatch(e, t) }) {
			keep = append(keep, e)
		}
	}
	if !allow.Exists() {
		keep = slices.Clone(called) // built-in protocols allow "*" when they say nothing
	}
	slices.Sort(keep)
	keep = slices.Compact(keep)
	var removed []string
	for _, t := range l.Tools {
		if t.Calls == 0 && t.Offered > 0 {
			removed = append(removed, t.Tool)
		}
	}
	for _, e := range old {
		if e != "*" && !slices.Contains(keep, e) && !slices.Contains(removed, e) {
			removed = append(removed, e)
		}
	}
	if len(removed) == 0 && slices.Equal(keep, old) {
		return
	}
	b.set("tools.allow", keep)
	for _, r := range removed {
		s.Proposals = append(s.Proposals, Proposal{Kind: "allow", Tool: r,
			Text:     fmt.Sprintf("remove %s from tools.allow: offered in %d requests, never called", r, offered[r]),
			Evidence: Count{Calls: 0}})
	}
	if len(removed) == 0 {
		s.Proposals = append(s.Proposals, Proposal{Kind: "allow", Text: "tools.allow lists the tools called by name: " + strings.Join(keep, ", ")})
	}
}

func globMatch(glob, name string) bool {
	if glob == name {
		return true
	}
	ok, err := path.Match(glob, name)
	return err == nil && ok
}

// mode proposes refuse where the version learned from runs in audit mode.
func (b *builder) mode(s *Suggestion) {
	if b.root.Get("toolCalls.onViolation").String() != string(vet.ModeAudit) {
		return
	}
	b.set("toolCalls.onViolation", string(vet.ModeRefuse))
	s.Proposals = append(s.Proposals, Proposal{Kind: "onViolation",
		Text: "onViolation refuse (was audit): the proposed rules block what they catch"})
}

// provenance proposes a provenance rule for an argument whose values came from trusted sources.
func (b *builder) provenance(tool string, a ArgLearned, s *Suggestion) {
	as := dominantKind(a.Kinds)
	if as == "" || a.Calls < b.o.MinCalls || b.hasRule("provenance", tool, a.Path) {
		return
	}
	from, covered, blocked := b.cover(a)
	if len(from) == 0 || float64(covered.Calls) < b.o.Coverage*float64(a.Calls) {
		return
	}
	var labels []string
	for _, src := range from {
		labels = append(labels, src.Source)
		if src.Field != "" && !b.trustedWhole(src.Source) {
			b.trustField(src, s, tool, a.Path)
		}
	}
	slices.Sort(labels)
	labels = slices.Compact(labels)
	id := b.id("learned-" + ruleName(tool, a.Path))
	rule := map[string]any{"id": id, "tool": tool, "path": a.Path, "as": as, "from": labels}
	b.appendRule("provenance", rule)
	var names []string
	for _, src := range from {
		names = append(names, src.String())
	}
	s.Proposals = append(s.Proposals, Proposal{Kind: "provenance", Tool: tool, Path: a.Path, Rule: id,
		Text: fmt.Sprintf("%s of %s from %s: %d of %d calls had their value there", a.Path, tool, strings.Join(names, ", "),
			covered.Calls, a.Calls),
		Evidence: covered, WouldBlock: blocked})
}

// dominantKind is the as of a provenance rule for values of these kinds: the kind of them all
// (numbers and ids as id), auto when they are mixed, "" for text (words are no origin) or nothing.
func dominantKind(kinds map[string]int) string {
	var ks []string
	for k, n := range kinds {
		if n == 0 {
			continue
		}
		if k == "number" {
			k = "id"
		}
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	switch {
	case len(ks) == 0 || slices.Contains(ks, "text"):
		return ""
	case len(ks) == 1:
		return ks[0]
	}
	return "auto"
}

// trustable reports whether a provenance rule may list a source: user, app, an operator list, or a
// tool's (or MCP server's) output where its field is known or the definition trusts it whole.
func (b *builder) trustable(src Source) bool {
	switch {
	case src.Source == "user", src.Source == "app", strings.HasPrefix(src.Source, "list:"):
		return true
	case strings.HasPrefix(src.Source, "tool:") && src.Source != "tool:?", strings.HasPrefix(src.Source, "mcp:"):
		return src.Field != "" || b.trustedWhole(src.Source)
	}
	return false
}

// cover chooses the trustable sources that cover most of an argument's calls, one at a time while
// each adds calls, until o.Coverage of them are covered; it returns them, the calls covered and
// those left (which the rule would have blocked), conversations counted once.
func (b *builder) cover(a ArgLearned) (from []Source, covered, left Count) {
	var cands []Source
	for _, set := range a.Sets {
		for _, src := range set.Sources {
			if b.trustable(src) && !slices.Contains(cands, src) {
				cands = append(cands, src)
			}
		}
	}
	in := func(set SetLearned, chosen []Source) bool {
		return slices.ContainsFunc(set.Sources, func(s Source) bool { return slices.Contains(chosen, s) })
	}
	total := func(chosen []Source) int {
		n := 0
		for _, set := range a.Sets {
			if in(set, chosen) {
				n += set.Calls
			}
		}
		return n
	}
	slices.SortFunc(cands, func(x, y Source) int { return strings.Compare(x.String(), y.String()) })
	for float64(total(from)) < b.o.Coverage*float64(a.Calls) {
		best, bestN := -1, total(from)
		for i, c := range cands {
			if n := total(append(slices.Clone(from), c)); !slices.Contains(from, c) && n > bestN {
				best, bestN = i, n
			}
		}
		if best < 0 {
			break
		}
		from = append(from, cands[best])
	}
	var inSets, outSets []SetLearned
	for _, set := range a.Sets {
		if in(set, from) {
			inSets = append(inSets, set)
		} else {
			outSets = append(outSets, set)
		}
	}
	return from, sumSets(inSets), sumSets(outSets)
}

// sumSets adds counts, each conversation once.
func sumSets(sets []SetLearned) Count {
	var out Count
	convs := map[uint64]bool{}
	for _, s := range sets {
		out.Calls += s.Calls
		out.AtLeast = out.AtLeast || s.AtLeast
		for _, c := range s.convs {
			convs[c] = true
		}
		for _, id := range s.Requests {
			if !slices.Contains(out.Requests, id) && len(out.Requests) < 2*maxRequests {
				out.Requests = append(out.Requests, id)
			}
		}
	}
	out.Conversations = len(convs)
	return out
}

// trustedWhole reports whether the definition trusts a tool's (tool:NAME) or MCP server's
// (mcp:NAME) output whole.
func (b *builder) trustedWhole(label string) bool {
	name := strings.TrimPrefix(label, "tool:")
	found := false
	b.root.Get("toolCalls.toolOutputs.trusted").ForEach(func(_, v gjson.Result) bool {
		g := v.String()
		if strings.HasPrefix(label, "mcp:") {
			found = strings.HasPrefix(g, "mcp:") && globMatch(strings.TrimPrefix(g, "mcp:"), strings.TrimPrefix(label, "mcp:"))
		} else {
			found = !strings.HasPrefix(g, "mcp:") && globMatch(g, name)
		}
		return !found
	})
	return found
}

// trustField adds a tool's field to toolOutputs.trustedPaths.
func (b *builder) trustField(src Source, s *Suggestion, tool, argPath string) {
	key := strings.TrimPrefix(src.Source, "tool:")
	at := "toolCalls.toolOutputs.trustedPaths." + escapeSjson(key)
	var paths []string
	gjson.GetBytes(b.body, at).ForEach(func(_, v gjson.Result) bool {
		paths = append(paths, v.String())
		return true
	})
	if slices.Contains(paths, src.Field) {
		return
	}
	b.set(at, append(paths, src.Field))
	s.Proposals = append(s.Proposals, Proposal{Kind: "trustedPaths", Tool: key, Path: src.Field,
		Text: fmt.Sprintf("trust %s of the output of %s (toolOutputs.trustedPaths): the source of %s of %s", src.Field, key, argPath, tool)})
}

// escapeSjson escapes a map key for an sjson path.
func escapeSjson(k string) string {
	var b strings.Builder
	for _, r := range k {
		if strings.ContainsRune(`.*?|#@\:`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// hosts proposes a scan rule listing the hosts and domains found in an argument in enough
// conversations.
func (b *builder) hosts(tool string, a ArgLearned, s *Suggestion) {
	if a.Calls < b.o.MinCalls || b.hasRule("scan", tool, a.Path) {
		return
	}
	var keep []string
	var kept, dropped []ItemLearned
	find := []string{}
	for _, it := range a.Items {
		if it.Kind != "host" && it.Kind != "domain" {
			continue
		}
		enough := it.Conversations >= b.o.MinHostConversations || a.Conversations < b.o.MinHostConversations
		if _, bad := vet.NewHostList([]string{it.Name}); len(bad) > 0 || !enough {
			dropped = append(dropped, it)
			continue
		}
		kept = append(kept, it)
		keep = append(keep, it.Name)
		kind := map[string]string{"host": "url", "domain": "email"}[it.Kind]
		if !slices.Contains(find, kind) {
			find = append(find, kind)
		}
	}
	if len(keep) == 0 {
		return
	}
	slices.Sort(keep)
	keep = slices.Compact(keep)
	slices.Sort(find)
	id := b.id("learned-" + ruleName(tool, a.Path) + "-hosts")
	b.appendRule("scan", map[string]any{"id": id, "tool": tool, "path": a.Path, "find": find, "hosts": keep})
	var blocked Count
	var names []string
	for _, it := range dropped {
		blocked.Calls += it.Calls
		blocked.Conversations += it.Conversations
		names = append(names, it.Name)
	}
	text := fmt.Sprintf("links and addresses in %s of %s only to %s", a.Path, tool, strings.Join(keep, ", "))
	if len(names) > 0 {
		text += fmt.Sprintf("; left out, seen in fewer than %d conversations: %s", b.o.MinHostConversations, strings.Join(names, ", "))
	}
	s.Proposals = append(s.Proposals, Proposal{Kind: "scan", Tool: tool, Path: a.Path, Rule: id, Text: text,
		Evidence: itemsCount(kept), WouldBlock: blocked})
}

func itemsCount(items []ItemLearned) Count {
	var c Count
	for _, it := range items {
		c.Calls += it.Calls
		c.Conversations = max(c.Conversations, it.Conversations)
	}
	return c
}

// budget proposes a budget with headroom: twice the most calls one conversation made.
func (b *builder) budget(t ToolLearned, s *Suggestion) {
	if t.Calls < b.o.MinCalls || t.MaxPerConversation == 0 || b.hasRule("budgets", t.Tool, "") {
		return
	}
	n := 2 * t.MaxPerConversation
	id := b.id("learned-" + ruleName(t.Tool, "") + "-budget")
	b.appendRule("budgets", map[string]any{"id": id, "tool": t.Tool, "maxCalls": n})
	s.Proposals = append(s.Proposals, Proposal{Kind: "budget", Tool: t.Tool, Rule: id,
		Text:     fmt.Sprintf("at most %d calls of %s per conversation: the most one conversation made was %d", n, t.Tool, t.MaxPerConversation),
		Evidence: t.Count})
}

// hasRule reports whether the definition has a rule of kind on tool (and path, unless "").
func (b *builder) hasRule(kind, tool, p string) bool {
	found := false
	b.root.Get("toolCalls." + kind).ForEach(func(_, r gjson.Result) bool {
		found = r.Get("tool").String() == tool && (p == "" || r.Get("path").String() == p)
		return !found
	})
	return found
}

func (b *builder) appendRule(kind string, rule map[string]any) {
	b.set("toolCalls."+kind+".-1", rule)
}

// ruleName makes a rule id's part from a tool and a path: letters, digits, '_' and '-'.
func ruleName(tool, p string) string {
	s := tool
	if p != "" {
		s += "-" + p
	}
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		if r == '#' {
			return 'N'
		}
		return '_'
	}, s)
}
