package flow

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
)

// rule is one compiled information-flow rule, of any kind. Check, Explain and Summary go through
// this interface only; a new kind is a type that implements it and a line in ruleKinds.
type rule interface {
	base() *ruleBase
	// tools are the globs of the tools the rule applies to.
	tools() []string
	// check returns the decision kind and the reason the call's arguments break the rule, or "",
	// and for a rule that asks for confirmation the values that break it. Called with the
	// conversation's lock.
	check(c *Conversation, args gjson.Result) (kind, why string, bad []badValue)
	// summary describes what the rule checks, for Explain.
	summary() string
	// state is what the rule would do in the conversation now, for Summary. Called with the lock.
	state(c *Conversation) string
	// indexed are the source patterns whose segments provenance lookups need indexed.
	indexed() []srcPattern
}

// ruleKind is one kind of information-flow rule: its key in a Spec (and the prefix of its rules'
// default names), its name in explanations and summaries, and how a Spec's rules of the kind
// compile.
type ruleKind struct {
	key, name string
	compile   func(probs *problems, s Spec, name func(i int, id string) string) []rule
}

// ruleKinds are the kinds, in the order Check judges a call by them.
func ruleKinds() []ruleKind {
	return []ruleKind{
		{"provenance", KindProvenance, func(probs *problems, s Spec, name func(int, string) string) []rule {
			return compileEach(s.Provenance, func(i int, r ProvenanceRule) rule {
				c := compileProvenance(probs, i, r, name(i, r.ID))
				return &c
			})
		}},
		{"scan", "scan", func(probs *problems, s Spec, name func(int, string) string) []rule {
			return compileEach(s.Scan, func(i int, r ScanRule) rule {
				c := compileScan(probs, i, r, name(i, r.ID))
				return &c
			})
		}},
		{"budgets", KindBudget, func(probs *problems, s Spec, name func(int, string) string) []rule {
			return compileEach(s.Budgets, func(i int, r BudgetRule) rule { return compileBudget(probs, i, r, name(i, r.ID)) })
		}},
		{"flows", KindFlow, func(probs *problems, s Spec, name func(int, string) string) []rule {
			return compileEach(s.Flows, func(i int, r FlowRule) rule { return compileFlow(probs, i, r, name(i, r.ID)) })
		}},
	}
}

func compileEach[T any](specs []T, compile func(int, T) rule) []rule {
	out := make([]rule, 0, len(specs))
	for i, s := range specs {
		out = append(out, compile(i, s))
	}
	return out
}

func compileBudget(probs *problems, i int, r BudgetRule, name string) *budgetRule {
	at := fmt.Sprintf("budgets[%d]", i)
	b := &budgetRule{ruleBase: ruleBase{name: name, keyArgs: r.KeyArgs}, tool: r.Tool}
	b.confirm = probs.checkVerdict(at+".verdict", r.Verdict)
	probs.checkGlob(at+".tool", r.Tool)
	probs.checkKeyArgs(at+".keyArgs", r.KeyArgs)
	switch {
	case r.MaxCalls == nil:
		probs.add(at+".maxCalls", "required: the most calls allowed per conversation, such as 3")
	case *r.MaxCalls < 0:
		probs.add(at+".maxCalls", "must be 0 or more")
	default:
		b.max = *r.MaxCalls
	}
	return b
}

func compileFlow(probs *problems, i int, r FlowRule, name string) *flowRule {
	at := fmt.Sprintf("flows[%d]", i)
	f := &flowRule{ruleBase: ruleBase{name: name, keyArgs: r.KeyArgs}, globs: r.Tools}
	f.confirm = probs.checkVerdict(at+".verdict", r.Verdict)
	probs.checkKeyArgs(at+".keyArgs", r.KeyArgs)
	if len(r.After) == 0 {
		probs.add(at+".after", "required: the sources that trigger the rule, such as untrusted or tool:web_fetch")
	}
	f.after = parseSources(probs, at+".after", r.After, false)
	if len(r.Tools) == 0 {
		probs.add(at+".tools", "required: the tools the rule blocks or holds, names or globs")
	}
	for j, g := range r.Tools {
		probs.checkGlob(fmt.Sprintf("%s.tools[%d]", at, j), g)
	}
	return f
}

func (r *ruleBase) base() *ruleBase { return r }

func (r *provRule) tools() []string { return []string{r.tool} }

func (r *provRule) check(c *Conversation, args gjson.Result) (string, string, []badValue) {
	why, bad := c.checkProvenance(r, args)
	return KindProvenance, why, bad
}

func (r *provRule) summary() string {
	as := r.as
	if r.matchURL {
		as += ", whole URL"
	}
	if schemes := slices.Sorted(maps.Keys(r.schemes)); (r.as == AsURL || r.as == AsAuto) && !slices.Equal(schemes, []string{"http", "https"}) {
		as += ", schemes " + strings.Join(schemes, " ")
	}
	if r.negate {
		return fmt.Sprintf("%s (%s) must not occur in %s", r.path, as, patterns(r.from))
	}
	return fmt.Sprintf("%s (%s) must occur in %s", r.path, as, patterns(r.from))
}

func (r *provRule) state(*Conversation) string {
	return "checks " + r.path + " against " + patterns(r.from)
}

func (r *provRule) indexed() []srcPattern { return r.from }

func (r *scanRule) tools() []string { return []string{r.tool} }

func (r *scanRule) check(c *Conversation, args gjson.Result) (string, string, []badValue) {
	return c.checkScan(r, args)
}

func (r *scanRule) summary() string {
	var checks []string
	if r.hosts != nil {
		checks = append(checks, "hosts listed")
	}
	if r.notHosts != nil {
		checks = append(checks, "no excluded host")
	}
	if r.from != nil {
		checks = append(checks, "occur in "+patterns(r.from))
	}
	if r.notFrom != nil {
		checks = append(checks, "not occur in "+patterns(r.notFrom))
	}
	return fmt.Sprintf("%s found in %s must have: %s", r.kinds, r.path, strings.Join(checks, "; "))
}

func (r *scanRule) state(*Conversation) string { return "scans " + r.path }

func (r *scanRule) indexed() []srcPattern { return append(slices.Clip(r.from), r.notFrom...) }

func (r *budgetRule) tools() []string { return []string{r.tool} }

func (r *budgetRule) check(c *Conversation, _ gjson.Result) (string, string, []badValue) {
	return KindBudget, c.checkBudget(r), nil
}

func (r *budgetRule) summary() string { return fmt.Sprintf("at most %d calls per conversation", r.max) }

func (r *budgetRule) state(c *Conversation) string {
	if why := c.checkBudget(r); why != "" {
		return why
	}
	used := 0
	for _, h := range c.calls {
		if matchCover(r.tool, h.Tool) {
			used++
		}
	}
	return fmt.Sprintf("%d of %d calls used", used, r.max)
}

func (r *budgetRule) indexed() []srcPattern { return nil }

func (r *flowRule) tools() []string { return r.globs }

func (r *flowRule) check(c *Conversation, _ gjson.Result) (string, string, []badValue) {
	return KindFlow, c.checkFlow(r), nil
}

func (r *flowRule) summary() string {
	return "after output of " + patterns(r.after) + " is in the conversation"
}

func (r *flowRule) state(c *Conversation) string {
	if why := c.checkFlow(r); why != "" {
		return "triggered: " + why
	}
	return "not triggered"
}

func (r *flowRule) indexed() []srcPattern { return nil }
