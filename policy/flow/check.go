package flow

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/flow/scan"
	"github.com/promptgate/promptgate/policy/vet"
)

// Decision kinds: the audit log's kind of each Decision.
const (
	KindProvenance = "provenance" // a provenance rule, or a scan rule's from check
	KindBudget     = "budget"
	KindFlow       = "flow"
	KindConfirm    = "confirm"
	// KindToolCall is a scan rule's hosts check: an argument check like vet's hosts rules.
	KindToolCall = vet.KindToolCall
)

// Verdicts of Decisions and Results.
const (
	VerdictAllowed   = "allowed"
	VerdictBlocked   = "blocked"
	VerdictHeld      = "held"      // waiting for the user's confirmation; the Notice replaces the call
	VerdictConfirmed = "confirmed" // released by the user's code, once
	VerdictExpired   = "expired"   // the user gave a code that has expired (the call is held again)
	VerdictReused    = "reused"    // the user gave a code already used (the call is held again)
)

// Call is one tool call of the response, already vetted (name allowed, arguments one JSON object
// that passed the schema and the argument rules).
type Call struct {
	Tool string
	Args []byte
}

// Decision is one outcome for the decision log. Reason never holds argument keys or values: it
// names the rule, the rule's path, a value's ordinal or a byte offset, and sources.
type Decision struct {
	Kind    string
	Verdict string
	Tool    string
	Rule    string
	Reason  string
}

// Result is the outcome of checking one call.
type Result struct {
	// Verdict is VerdictAllowed, VerdictBlocked, VerdictHeld or VerdictConfirmed.
	Verdict string
	// Decisions are the rules the call broke, in the order provenance, scan, budgets, flows, then
	// the confirmation's; none for an allowed call.
	Decisions []Decision
	// Reason is the first blocking decision's reason (VerdictBlocked).
	Reason string
	// Notice replaces a held call (VerdictHeld): it names the tool and its key arguments and gives
	// the confirmation code. It holds argument values (vetted ones), so it goes to the client only.
	Notice string
	// Question is the Notice without its code: what a client that asks the user itself shows (an
	// MCP elicitation), the user's answer being the confirmation. It goes to the client only.
	Question string
}

// Released reports whether the call may reach the client.
func (r Result) Released() bool { return r.Verdict == VerdictAllowed || r.Verdict == VerdictConfirmed }

// violation is one broken rule.
type violation struct {
	kind   string
	rule   *ruleBase
	reason string
	// bad are the values that broke a rule that asks for confirmation, for its notice to show; at
	// most maxNoticeBroken+1 (enough to tell that they do not fit). Nil for a rule that blocks.
	bad []badValue
}

// badValue is one value that broke a rule: an argument value (provenance), or an item found in one
// (scan).
type badValue struct {
	path string
	n    int          // the value's number at the path, from 1
	item string       // the item's name in the value ("link 2 at offset 14"), "" for the value itself
	v    gjson.Result // the value, or the item's text as a string
}

// name names the value as reasons do, with the path as given (quote it for a notice).
func (b badValue) name(path string) string {
	at := valueAt(path, b.n)
	if b.item != "" {
		at += ": " + b.item
	}
	return at
}

// valueAt names the n-th value at a rule's path, as reasons do.
func valueAt(path string, n int) string {
	if n > 1 {
		return path + " (value " + strconv.Itoa(n) + ")"
	}
	return path
}

// collect adds a value that broke a rule asking for confirmation, and reports whether the rule's
// check should go on to find the others (while they may still fit in a notice).
func collect(r *ruleBase, bad *[]badValue, b badValue) bool {
	if !r.confirm {
		return false
	}
	*bad = append(*bad, b)
	return len(*bad) <= maxNoticeBroken
}

// Check judges one call of the response. Calls must be checked in the order of the response:
// budgets count the calls already released in it. A released call (allowed or confirmed) counts;
// a blocked or held one does not.
func (c *Conversation) Check(call Call) Result {
	var vs []violation
	if !gjson.Valid(string(call.Args)) || !gjson.Parse(string(call.Args)).IsObject() {
		return Result{Verdict: VerdictBlocked, Reason: "arguments are not a JSON object", Decisions: []Decision{{
			Kind: KindToolCall, Verdict: VerdictBlocked, Tool: call.Tool, Reason: "arguments are not a JSON object"}}}
	}
	args := gjson.Parse(string(call.Args))
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.p.kinds {
		for _, r := range k.rules {
			if !coversTool(r.tools(), call.Tool) {
				continue
			}
			if kind, why, bad := r.check(c, args); why != "" {
				vs = append(vs, violation{kind, r.base(), why, bad})
			}
		}
	}
	res := c.decide(call, args, vs)
	if res.Released() {
		c.made = append(c.made, call.Tool)
	}
	c.noteViolation(res)
	return res
}

// decide turns violations into a Result, running the confirmation when every violation asks for
// one.
func (c *Conversation) decide(call Call, args gjson.Result, vs []violation) Result {
	if len(vs) == 0 {
		return Result{Verdict: VerdictAllowed}
	}
	res := Result{}
	blocked := false
	for _, v := range vs {
		d := Decision{Kind: v.kind, Verdict: VerdictHeld, Tool: call.Tool, Rule: v.rule.name, Reason: "rule " + v.rule.name + ": " + v.reason}
		if !v.rule.confirm {
			d.Verdict = VerdictBlocked
			if !blocked {
				res.Reason = d.Reason
			}
			blocked = true
		}
		res.Decisions = append(res.Decisions, d)
	}
	if blocked {
		res.Verdict = VerdictBlocked
		return res
	}
	out := c.confirm(call, args, vs)
	res.Decisions = append(res.Decisions, out.decisions...)
	res.Verdict, res.Notice, res.Question = out.verdict, out.notice, out.question
	if out.verdict != VerdictHeld {
		for i := range res.Decisions[:len(vs)] {
			res.Decisions[i].Verdict = out.verdict
		}
	}
	if out.verdict == VerdictBlocked {
		res.Reason = out.decisions[len(out.decisions)-1].Reason
	}
	return res
}

// coversTool reports whether a rule's tool list covers a tool.
func coversTool(globs []string, tool string) bool {
	for _, g := range globs {
		if matchCover(g, tool) {
			return true
		}
	}
	return false
}

// unseenNote is added to a reason when part of the history is not visible, or an output of a tool
// trusted in part could not be split (the first such output named, and how many more).
func (c *Conversation) unseenNote() string {
	note := ""
	if c.unseen != "" {
		note = "; part of the history is not visible (" + c.unseen + ")"
	}
	if n := len(c.unsplit); n > 0 {
		note += "; " + c.unsplit[0]
		if n > 1 {
			note += fmt.Sprintf(" (and %d more)", n-1)
		}
	}
	return note
}

// checkProvenance returns why the values at the rule's path break it, or "", and for a rule that
// asks for confirmation the values that break it.
func (c *Conversation) checkProvenance(r *provRule, args gjson.Result) (why string, bad []badValue) {
	n := 0
	vet.Walk(args, r.path, func(v gjson.Result, found bool) bool {
		n++
		at := valueAt(r.path, n)
		if !found {
			if r.optional {
				return true
			}
			if why == "" {
				why = at + " is missing"
			}
			return r.confirm
		}
		wrong := ""
		if kind, keys, words, bad := normalise(v, r.as, r.matchURL, r.schemes); bad != "" {
			wrong = at + " " + bad
		} else {
			ix := c.idx()
			for i, key := range keys {
				at := at
				if len(keys) > 1 {
					at += " (address " + strconv.Itoa(i+1) + ")"
				}
				where := ix.lookup(kind, key, words)
				if r.negate {
					if hit := where & c.mask(ix, r.from, false); hit != 0 {
						wrong = at + " occurs in an excluded source (" + ix.labelsOf(hit) + ")"
					}
				} else if where&c.mask(ix, r.from, true) == 0 {
					wrong = at + " does not occur in " + patterns(r.from) + c.unseenNote()
				}
				if wrong != "" {
					break
				}
			}
		}
		if wrong == "" {
			return true
		}
		if why == "" {
			why = wrong
		}
		return collect(&r.ruleBase, &bad, badValue{path: r.path, n: n, v: v})
	})
	return why, bad
}

// patterns lists source patterns as written.
func patterns(ps []srcPattern) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// checkScan returns the kind and reason of the first item that breaks the rule, or "", and for a
// rule that asks for confirmation the items that break it.
func (c *Conversation) checkScan(r *scanRule, args gjson.Result) (kind, why string, bad []badValue) {
	n := 0
	vet.Walk(args, r.path, func(v gjson.Result, found bool) bool {
		n++
		at := valueAt(r.path, n)
		k, w, more := "", "", true
		switch {
		case !found:
			if !r.optional {
				k, w = KindToolCall, at+" is missing"
			}
		case v.Type == gjson.String || v.IsObject():
			text, ok := argText(v)
			if !ok {
				k, w = KindToolCall, at+" is nested too deep to scan"
				more = collect(&r.ruleBase, &bad, badValue{path: r.path, n: n, v: v})
			} else {
				k, w, more = c.scanText(r, n, text, &bad)
			}
		}
		if why == "" {
			kind, why = k, w
		}
		return why == "" || r.confirm && more
	})
	return kind, why, bad
}

// argText gathers what a scan rule reads of an argument: every key and every string value, under
// any key, joined by line breaks; a string that is itself a JSON object or array (a request body, a
// payload) is read as it is written and then as a JSON reader decodes it, so its escapes
// ("eve\u0040evil.net") hide nothing from the scan. It reports false when the value nests deeper
// than maxCollectDepth, JSON in strings included, for the scan to refuse rather than read it in
// part.
func argText(v gjson.Result) (string, bool) {
	var b strings.Builder
	add := func(s string) {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(s)
	}
	ok := true
	var walk func(v gjson.Result, depth int)
	walk = func(v gjson.Result, depth int) {
		switch {
		case depth > maxCollectDepth:
			ok = false
		case v.Type == gjson.String:
			add(v.Str)
			if doc, ok := jsonDoc(v.Str); ok {
				walk(doc, depth+1)
			}
		case v.IsObject():
			v.ForEach(func(k, e gjson.Result) bool {
				add(k.Str)
				walk(e, depth+1)
				return ok
			})
		case v.IsArray():
			v.ForEach(func(_, e gjson.Result) bool {
				walk(e, depth+1)
				return ok
			})
		}
	}
	walk(v, 0)
	return b.String(), ok
}

// jsonDoc reads s as a JSON object or array, if it is one.
func jsonDoc(s string) (gjson.Result, bool) {
	t := strings.TrimSpace(s)
	if t == "" || t[0] != '{' && t[0] != '[' || !gjson.Valid(t) {
		return gjson.Result{}, false
	}
	return gjson.Parse(t), true
}

// scanText checks every item of the rule's kinds found in one string: the kind and reason of the
// first that breaks the rule, each that does added to bad (collect), and whether to go on.
// A link is checked in every reading (see scan.Reading): each must pass.
func (c *Conversation) scanText(r *scanRule, n int, text string, bad *[]badValue) (kind, why string, more bool) {
	counts := map[scan.Kind]int{}
	for _, it := range scan.Find(text, r.kinds) {
		counts[it.Kind]++
		k, w := c.scanItem(r, text, it)
		if w == "" {
			continue
		}
		bv := badValue{path: r.path, n: n, item: itemName(it, counts[it.Kind]), v: gjson.Result{Type: gjson.String, Str: it.Text(text)}}
		if why == "" {
			kind, why = k, bv.name(r.path)+" "+w
		}
		if !collect(&r.ruleBase, bad, bv) {
			return kind, why, false
		}
	}
	return kind, why, true
}

// scanItem checks one found item: the kind and reason (to follow the item's name) when it breaks
// the rule, or "".
func (c *Conversation) scanItem(r *scanRule, text string, it scan.Item) (kind, why string) {
	if r.hostsNeeded && it.Kind != scan.IBAN {
		if bad := r.checkHost(it); bad != "" {
			return KindToolCall, bad
		}
	}
	if r.from == nil && r.notFrom == nil {
		return "", ""
	}
	vk, keys, ok := itemKeys(text, it, r.matchURL)
	if !ok {
		return KindProvenance, "cannot be read"
	}
	ix := c.idx()
	for _, key := range keys {
		where := ix.lookup(vk, key, nil)
		if r.from != nil && where&c.mask(ix, r.from, true) == 0 {
			return KindProvenance, "does not occur in " + patterns(r.from) + c.unseenNote()
		}
		if r.notFrom != nil {
			if hit := where & c.mask(ix, r.notFrom, false); hit != 0 {
				return KindProvenance, "occurs in an excluded source (" + ix.labelsOf(hit) + ")"
			}
		}
	}
	return "", ""
}

// checkHost checks a found URL's scheme, user info and host in every reading, or an address's
// domain, against the rule's hosts and not.hosts. A link without a host, or whose host cannot be
// read, fails both.
func (r *scanRule) checkHost(it scan.Item) string {
	if it.Kind == scan.Email {
		if it.Malformed {
			return "cannot be read"
		}
		return r.checkName(it.Kind, it.Host)
	}
	scheme := it.Scheme
	if scheme == "" {
		scheme = "https"
	}
	for _, rd := range it.Readings() {
		switch {
		case rd.Unreadable:
			return "has a host that cannot be read"
		case rd.Host == "":
			return "has no host"
		case !r.schemes[scheme]:
			return "has a scheme that is not allowed"
		case rd.UserInfo:
			return "has user info"
		}
		if bad := r.checkName(it.Kind, rd.Host); bad != "" {
			return bad
		}
	}
	return ""
}

// checkName checks one host or domain against the rule's hosts and not.hosts.
func (r *scanRule) checkName(kind scan.Kind, host string) string {
	h, err := vet.NormHost(host)
	if err != nil {
		return "has an invalid host"
	}
	if r.hosts != nil && !r.hosts.Match(h) {
		if kind == scan.Email {
			return "is at a domain that is not allowed"
		}
		return "has a host that is not allowed"
	}
	if r.notHosts != nil && r.notHosts.Match(h) {
		if kind == scan.Email {
			return "is at an excluded domain"
		}
		return "has an excluded host"
	}
	return ""
}

// checkBudget counts the calls of the rule's tools: in the conversation, and released in this
// response. Called with c.mu held.
func (c *Conversation) checkBudget(r *budgetRule) string {
	if c.unseen != "" {
		return "the conversation's earlier calls are not visible (" + c.unseen + "), so its budget cannot be counted"
	}
	used := 0
	for _, h := range c.calls {
		if matchCover(r.tool, h.Tool) {
			used++
		}
	}
	for _, t := range c.made {
		if matchCover(r.tool, t) {
			used++
		}
	}
	if used+1 > r.max {
		return fmt.Sprintf("call %d of %s in this conversation is over the budget of %d", used+1, r.tool, r.max)
	}
	return ""
}

// checkFlow reports what in the conversation triggers the rule, or "".
func (c *Conversation) checkFlow(r *flowRule) string {
	for i, seg := range c.segments {
		for _, p := range r.after {
			if p.matches(seg.Source, c.trusted[i]) {
				trust := "untrusted"
				if c.trusted[i] {
					trust = "trusted"
				}
				return fmt.Sprintf("%s output (%s) is in the conversation", trust, seg.Source.label())
			}
		}
	}
	for _, p := range r.after {
		if p.kind == patViolation {
			if why := c.caughtReason(); why != "" {
				return why
			}
		}
	}
	if c.unseen != "" {
		for _, p := range r.after {
			if p.kind == patUntrusted {
				return "part of the history is not visible (" + c.unseen + ") and counts as untrusted output"
			}
		}
	}
	return ""
}
