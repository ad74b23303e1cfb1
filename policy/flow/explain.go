package flow

import (
	"slices"
	"strings"
)

// Explanation describes a policy for the admin preview.
type Explanation struct {
	// TrustedSources are the sources provenance trusts: user, app, and tool:GLOB per trusted tool
	// output (a tool must match a glob of every list; a workflow's list is marked as narrowing).
	TrustedSources []string   `json:"trustedSources"`
	Rules          []RuleInfo `json:"rules"`
	ConfirmTTL     string     `json:"confirmTTL"`
	ContinueRounds int        `json:"continueRounds"`
}

// RuleInfo describes one rule.
type RuleInfo struct {
	Kind    string   `json:"kind"` // provenance, scan, budget or flow
	Rule    string   `json:"rule"`
	Tools   []string `json:"tools"`
	Verdict string   `json:"verdict"` // block or confirm
	Summary string   `json:"summary"`
}

// Explain describes the policy.
func (p *Policy) Explain() Explanation {
	e := Explanation{TrustedSources: []string{"user", "app"}, ConfirmTTL: p.ttl.String(), ContinueRounds: p.rounds, Rules: []RuleInfo{}}
	for i, lv := range p.trust {
		narrowing := ""
		if i > 0 {
			narrowing = " (narrowing)"
		}
		label := func(g string) string {
			if strings.HasPrefix(g, "mcp:") {
				return g
			}
			return "tool:" + g
		}
		for _, g := range lv.globs {
			e.TrustedSources = append(e.TrustedSources, label(g)+narrowing)
		}
		keys := make([]string, 0, len(lv.paths))
		for k := range lv.paths {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			e.TrustedSources = append(e.TrustedSources, label(k)+" at "+strings.Join(lv.paths[k], ", ")+narrowing)
		}
	}
	verdict := func(r ruleBase) string {
		if r.confirm {
			return VerdictConfirm
		}
		return VerdictBlock
	}
	for _, k := range p.kinds {
		for _, r := range k.rules {
			e.Rules = append(e.Rules, RuleInfo{k.name, r.base().name, slices.Clone(r.tools()), verdict(*r.base()), r.summary()})
		}
	}
	return e
}

// Summary describes one request's conversation for the admin preview.
type Summary struct {
	Sources []SourceInfo `json:"sources"`
	// Unseen says why part of the history is not visible; "" when all of it is.
	Unseen string `json:"unseen,omitempty"`
	// UntrustedWhole says, for each output of a tool trusted in part that could not be split, why
	// it is untrusted whole.
	UntrustedWhole []string `json:"untrustedWhole,omitempty"`
	// Calls counts the calls already in the conversation per tool.
	Calls map[string]int `json:"calls"`
	// Rules are the rules that apply to the given tools, with their state in this conversation.
	Rules []RuleState `json:"rules"`
}

// SourceInfo is one source of the conversation.
type SourceInfo struct {
	Source   string `json:"source"`
	Trusted  bool   `json:"trusted"`
	Segments int    `json:"segments"`
	Chars    int    `json:"chars"`
}

// RuleState is a rule that applies to some of the tools, and what it would do now.
type RuleState struct {
	Kind  string   `json:"kind"`
	Rule  string   `json:"rule"`
	Tools []string `json:"tools"`
	State string   `json:"state"`
}

// Summary describes the conversation: its sources and whether each is trusted, the calls so far,
// and the rules that apply to tools (e.g. the request's kept tools), a flow rule as triggered or
// not, a budget with its count.
func (c *Conversation) Summary(tools []string) Summary {
	s := Summary{Unseen: c.unseen, UntrustedWhole: c.unsplit, Calls: map[string]int{}, Sources: []SourceInfo{}, Rules: []RuleState{}}
	at := map[Source]int{}
	for i, seg := range c.segments {
		j, ok := at[seg.Source]
		if !ok {
			j = len(s.Sources)
			at[seg.Source] = j
			s.Sources = append(s.Sources, SourceInfo{Source: seg.Source.String(), Trusted: c.trusted[i]})
		}
		s.Sources[j].Segments++
		s.Sources[j].Chars += len(seg.Text)
	}
	for _, h := range c.calls {
		s.Calls[h.Tool]++
	}
	covered := func(glob string) []string {
		var out []string
		for _, t := range tools {
			if matchCover(glob, t) && !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
		return out
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range c.p.kinds {
		for _, r := range k.rules {
			var ts []string
			for _, g := range r.tools() {
				for _, t := range covered(g) {
					if !slices.Contains(ts, t) {
						ts = append(ts, t)
					}
				}
			}
			if len(ts) > 0 {
				s.Rules = append(s.Rules, RuleState{k.name, r.base().name, ts, r.state(c)})
			}
		}
	}
	return s
}
