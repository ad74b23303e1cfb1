package flow

import (
	"fmt"
	"slices"
)

// Operator lists (toolCalls.sources): "on the list or typed by the user" as one rule, from ["user",
// "list:known_payees"]. A list is trusted. Its entries are indexed once, when the policy compiles,
// so a large list costs a lookup per value, not a scan per request.

// compiledList is one operator list with its entries indexed, each entry as a text of its own (a
// text value never matches across two entries).
type compiledList struct {
	name string
	ix   *index
}

// maxListEntry bounds one entry of a list, in bytes.
const maxListEntry = 4096

// compileLists checks and indexes a spec's lists, appended to those of the specs before it. A
// workflow may add lists but not change those of its base.
func (p *problems) compileLists(have []*compiledList, lists map[string][]string, workflow bool) []*compiledList {
	names := make([]string, 0, len(lists))
	for n := range lists {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		at := "sources." + n
		if !validListName(n) {
			p.add(at, "%q is not a list name: use 1-64 letters, digits, _ . -", n)
			continue
		}
		if slices.ContainsFunc(have, func(l *compiledList) bool { return l.name == n }) {
			if workflow {
				p.add(at, "the base protocol already has a list %q: a workflow may add lists, not change its base's", n)
			}
			continue
		}
		entries := lists[n]
		bad := false
		for i, e := range entries {
			if e == "" || len(e) > maxListEntry {
				p.add(fmt.Sprintf("%s[%d]", at, i), "must be a value of 1 to %d bytes", maxListEntry)
				bad = true
			}
		}
		if !bad {
			have = append(have, compileList(n, entries))
		}
	}
	return have
}

// compileList indexes a list's entries: the items the scanners find, the id tokens and the words.
func compileList(name string, entries []string) *compiledList {
	src := Source{Kind: SourceList, Tool: name}
	c := &Conversation{segments: make([]Segment, len(entries))}
	for i, e := range entries {
		c.segments[i] = Segment{Source: src, Text: e, Message: -1}
	}
	ix := &index{c: c, labels: []Source{src}, segBit: make([]uint64, len(entries))}
	for i := range ix.segBit {
		ix.segBit[i] = 1
	}
	ix.items()
	ix.urlForms()
	ix.idTokens()
	ix.wordIndex()
	return &compiledList{name: name, ix: ix}
}

// listSegments are the lists a request brings beside the protocol's (from context sources the
// operator marked as lists), one segment per entry.
func listSegments(lists map[string][]string) []Segment {
	names := make([]string, 0, len(lists))
	for n := range lists {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []Segment
	for _, n := range names {
		if !validListName(n) {
			continue
		}
		for _, e := range lists[n] {
			if e != "" && len(e) <= maxListEntry {
				out = append(out, Segment{Source: Source{Kind: SourceList, Tool: n}, Text: e, Message: -1})
			}
		}
	}
	return out
}
