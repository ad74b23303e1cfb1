// Package flow judges a model's tool call by the conversation around it: where its argument values
// came from (provenance), what the links, addresses and IBANs inside its free text point to (scan),
// how often the tool has been called (budgets), and what the conversation has read before it
// (flows). A call that breaks a rule is blocked, or held until the user confirms it with a one-time
// code typed in their own message.
//
// Analyze reads a request body of any of the three surfaces (Chat Completions, Responses, Anthropic
// Messages) once, with gjson on the raw bytes, into a Conversation: ordered segments labelled by
// source (user, app, assistant, tool:NAME, context) and the tool calls already made. Check then
// judges each vetted call of the response, in order.
//
// It owns the information-flow rules, their JSON syntax and validation, the trust labels, the
// confirmation codes and the texts that go back to the client (notice, refusal). It does not read
// responses or streams, choose the protocol, apply onViolation or record decisions (proxy/ and
// policy/audit do), and it keeps no state between requests except what a Confirmer holds.
package flow

import (
	"fmt"
	"strings"
	"time"

	"github.com/promptgate/promptgate/policy/flow/scan"
	"github.com/promptgate/promptgate/policy/vet"
)

// Policy is a compiled Spec: immutable and safe for concurrent use.
type Policy struct {
	// trust is the toolOutputs of the protocol, then of each workflow that sets them; an output is
	// trusted as far as every level trusts it (trustOf).
	trust []trustLevel
	// kinds hold the rules of each kind of ruleKinds, in its order: the protocol's, then each
	// workflow's.
	kinds  []kindRules
	ttl    time.Duration
	rounds int
	// indexed are the patterns of every from list: a segment they cover is indexed for provenance.
	indexed []srcPattern
	// lists are the operator's lists (toolCalls.sources), indexed once, by name.
	lists []*compiledList
}

// ruleBase is what every rule kind has.
type ruleBase struct {
	name    string // ID, or kind[i]
	confirm bool
	keyArgs []string
}

type provRule struct {
	ruleBase
	tool     string
	path     string
	as       string
	matchURL bool
	schemes  map[string]bool // of URL values
	from     []srcPattern
	negate   bool
	optional bool
}

type scanRule struct {
	ruleBase
	tool, path  string
	kinds       scan.Kind
	hosts       *vet.HostList
	notHosts    *vet.HostList
	schemes     map[string]bool
	from        []srcPattern
	notFrom     []srcPattern
	matchURL    bool
	optional    bool
	hostsNeeded bool
}

type budgetRule struct {
	ruleBase
	tool string
	max  int
}

type flowRule struct {
	ruleBase
	after []srcPattern
	globs []string // the tools it applies to
}

// kindRules are the rules of one kind.
type kindRules struct {
	name  string
	rules []rule
}

// Compile checks and compiles specs: the protocol's, then those of the workflows that extend it.
// A workflow adds rules and can only narrow trust: a tool's output is trusted only where the
// protocol and every workflow that lists toolOutputs.trusted trust it. The shortest TTL and the
// fewest continue rounds win. Rules of a workflow without an id are named "workflow.KIND[i]".
func Compile(specs ...Spec) (*Policy, error) {
	return compile(specs)
}

func compile(specs []Spec) (*Policy, error) {
	kinds := ruleKinds()
	p := &Policy{ttl: DefaultConfirmTTL, rounds: DefaultContinueRounds, kinds: make([]kindRules, len(kinds))}
	for i, k := range kinds {
		p.kinds[i].name = k.name
	}
	var probs problems
	ttlSet, roundsSet := false, false
	for k, s := range specs {
		prefix := ""
		if k > 0 {
			prefix = "workflow."
		}
		if k == 0 || s.ToolOutputs.Trusted != nil || s.ToolOutputs.TrustedPaths != nil {
			p.trust = append(p.trust, probs.compileTrust(s.ToolOutputs))
		}
		p.lists = probs.compileLists(p.lists, s.Sources, k > 0)
		ids := map[string]string{}
		for ki, kind := range kinds {
			name := func(i int, id string) string {
				field := fmt.Sprintf("%s[%d]", kind.key, i)
				if id == "" {
					return prefix + field
				}
				if prev, dup := ids[id]; dup {
					probs.add(field+".id", "%q is already the id of %s: give each rule its own id", id, prev)
				}
				ids[id] = field
				return id
			}
			p.kinds[ki].rules = append(p.kinds[ki].rules, kind.compile(&probs, s, name)...)
		}
		if d := time.Duration(s.Confirm.TTL); d != 0 {
			if d < MinConfirmTTL || d > MaxConfirmTTL {
				probs.add("confirm.ttl", "%s is out of range: give %s to %s", d, MinConfirmTTL, MaxConfirmTTL)
			} else if !ttlSet || d < p.ttl {
				p.ttl, ttlSet = d, true
			}
		}
		if n := s.ContinueRounds; n != 0 {
			if n < 1 || n > MaxContinueRounds {
				probs.add("continueRounds", "%d is out of range: give 1 to %d", n, MaxContinueRounds)
			} else if !roundsSet || n < p.rounds {
				p.rounds, roundsSet = n, true
			}
		}
	}
	if err := probs.err(); err != nil {
		return nil, err
	}
	for _, k := range p.kinds {
		for _, r := range k.rules {
			p.indexed = append(p.indexed, r.indexed()...)
		}
	}
	return p, nil
}

func compileProvenance(probs *problems, i int, r ProvenanceRule, name string) provRule {
	at := fmt.Sprintf("provenance[%d]", i)
	c := provRule{ruleBase: ruleBase{name: name, keyArgs: r.KeyArgs}, tool: r.Tool, path: r.Path, optional: r.Optional}
	c.confirm = probs.checkVerdict(at+".verdict", r.Verdict)
	probs.checkGlob(at+".tool", r.Tool)
	probs.checkPath(at+".path", r.Path)
	probs.checkKeyArgs(at+".keyArgs", r.KeyArgs)
	switch r.As {
	case "", AsAuto:
		c.as = AsAuto
	case AsEmail, AsHost, AsURL, AsIBAN, AsID, AsText:
		c.as = r.As
	default:
		probs.add(at+".as", "%q is not a value kind: use auto, email, host, url, iban, id or text", r.As)
	}
	c.matchURL = probs.checkMatch(at+".match", r.Match, c.as == AsURL || c.as == AsAuto)
	c.schemes = probs.compileSchemes(at+".schemes", r.Schemes)
	if r.Schemes != nil && c.as != AsURL && c.as != AsAuto {
		probs.add(at+".schemes", `only applies to URLs: use it with as "url" or "auto", or leave it out`)
	}
	switch {
	case r.Not != nil && r.From != nil:
		probs.add(at, "has from and not: give one of them")
	case r.Not != nil:
		c.negate = true
		if len(r.Not.From) == 0 {
			probs.add(at+".not.from", "required: the sources the value must not come from")
		}
		c.from = parseSources(probs, at+".not.from", r.Not.From, true)
	case r.From != nil && len(r.From) == 0:
		probs.add(at+".from", `must list at least one source, or be left out for ["trusted"]`)
	case r.From != nil:
		c.from = parseSources(probs, at+".from", r.From, true)
	default:
		c.from = []srcPattern{{kind: patTrusted, widen: true}}
	}
	return c
}

// checkMatch reads a match field; it applies to URL values only.
func (p *problems) checkMatch(field, m string, urls bool) bool {
	switch m {
	case "", MatchHost:
		return false
	case MatchURL:
		if !urls {
			p.add(field, `only applies to URLs: use it with as "url" or "auto", or leave it out`)
		}
		return true
	}
	p.add(field, `%q: use "host" (compare a URL's host) or "url" (the whole URL)`, m)
	return false
}

func compileScan(probs *problems, i int, r ScanRule, name string) scanRule {
	at := fmt.Sprintf("scan[%d]", i)
	c := scanRule{ruleBase: ruleBase{name: name, keyArgs: r.KeyArgs}, tool: r.Tool, path: r.Path, optional: r.Optional}
	c.confirm = probs.checkVerdict(at+".verdict", r.Verdict)
	probs.checkGlob(at+".tool", r.Tool)
	probs.checkPath(at+".path", r.Path)
	probs.checkKeyArgs(at+".keyArgs", r.KeyArgs)
	if len(r.Find) == 0 && r.Find != nil {
		probs.add(at+".find", "must list at least one of url, email, iban, or be left out for all three")
	}
	for j, f := range r.Find {
		switch f {
		case "url":
			c.kinds |= scan.URL
		case "email":
			c.kinds |= scan.Email
		case "iban":
			c.kinds |= scan.IBAN
		default:
			probs.add(fmt.Sprintf("%s.find[%d]", at, j), "%q: use url, email or iban", f)
		}
	}
	if r.Find == nil {
		c.kinds = scan.All
	}
	c.matchURL = probs.checkMatch(at+".match", r.Match, c.kinds&scan.URL != 0)
	if r.Hosts != nil {
		l := probs.compileHosts(at+".hosts", r.Hosts)
		c.hosts = &l
	}
	if r.From != nil {
		if len(r.From) == 0 {
			probs.add(at+".from", "must list at least one source")
		}
		c.from = parseSources(probs, at+".from", r.From, true)
	}
	if r.Not != nil {
		if r.Not.Hosts == nil && r.Not.From == nil {
			probs.add(at+".not", "must hold hosts or from")
		}
		if r.Not.Hosts != nil {
			l := probs.compileHosts(at+".not.hosts", r.Not.Hosts)
			c.notHosts = &l
		}
		if r.Not.From != nil {
			if len(r.Not.From) == 0 {
				probs.add(at+".not.from", "must list at least one source")
			}
			c.notFrom = parseSources(probs, at+".not.from", r.Not.From, true)
		}
	}
	c.hostsNeeded = c.hosts != nil || c.notHosts != nil
	if !c.hostsNeeded && r.From == nil && (r.Not == nil || r.Not.From == nil) {
		probs.add(at, "needs a check: hosts, from, not.hosts or not.from")
	}
	if c.hostsNeeded && r.From == nil && (r.Not == nil || r.Not.From == nil) && c.kinds&scan.IBAN != 0 && r.Find != nil {
		probs.add(at+".find", "iban items have no host: add from, or leave iban out of find")
	}
	if r.Schemes != nil && !c.hostsNeeded {
		probs.add(at+".schemes", "only applies with hosts or not.hosts")
	}
	c.schemes = probs.compileSchemes(at+".schemes", r.Schemes)
	return c
}

// compileSchemes reads a schemes list: http and https when it is left out.
func (p *problems) compileSchemes(field string, schemes []string) map[string]bool {
	if schemes == nil {
		return map[string]bool{"http": true, "https": true}
	}
	if len(schemes) == 0 {
		p.add(field, "must list at least one scheme, or be left out for http and https")
	}
	m := map[string]bool{}
	for j, s := range schemes {
		if !validScheme(s) {
			p.add(fmt.Sprintf("%s[%d]", field, j), "%q is not a URL scheme", s)
		}
		m[strings.ToLower(s)] = true
	}
	return m
}

// ToolTrusted reports whether the policy trusts the whole output of a tool.
func (p *Policy) ToolTrusted(tool string) bool { return p.trustOf(tool, false).whole }

// trusted reports whether a segment's source is trusted.
func (p *Policy) trustedSource(s Source) bool {
	switch s.Kind {
	case SourceUser, SourceApp, SourceList:
		return true
	case SourceTool, SourceMCP:
		switch s.Part {
		case PartTrusted:
			return true
		case PartRest:
			return false
		}
		return p.trustOf(s.Tool, s.Kind == SourceMCP).whole
	}
	return false
}

// ConfirmTTL is how long a confirmation code stays valid.
func (p *Policy) ConfirmTTL() time.Duration { return p.ttl }

// ContinueRounds is the most rounds promptgate answers refused calls itself in one request.
func (p *Policy) ContinueRounds() int { return p.rounds }

// Empty reports whether the policy has no rule (trust labels alone decide nothing).
func (p *Policy) Empty() bool {
	if p == nil {
		return true
	}
	for _, k := range p.kinds {
		if len(k.rules) > 0 {
			return false
		}
	}
	return true
}

// validScheme reports whether s is a URL scheme: a letter, then letters, digits, '+', '-' or '.'.
func validScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}
