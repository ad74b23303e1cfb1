package proxy

import (
	"bytes"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/vet"
)

// plan is what one definitions snapshot derives, once, from one effective protocol for every
// request routed to it: the merged protocol, its compiled argument and information-flow rules and
// its parsed template. Everything in it is read-only once made, so requests share it.
type plan struct {
	eff      *policy.Effective
	rules    *vet.RuleSet
	rulesErr error
	flow     *flow.Policy
	flowErr  error
	// learning reads conversations for learn mode (the flow rules' operator lists kept); nil where
	// the flow rules do not compile.
	learning *flow.Policy

	tmplOnce sync.Once
	tmpl     *assembly.Template
	tmplErr  error
	// tmplRef is tmpl's X-Promptgate-Template value (templateRef), made once.
	tmplRef string

	// sets are the call sets (callSets) of the kept tools of the plan's last request that made
	// them; a request that keeps the same tools shares them. Read-only once stored.
	sets atomic.Pointer[keptSets]
}

// keptSets are the call sets of one list of kept tools, the list kept as a copy.
type keptSets struct {
	kept    []policy.Tool
	allowed map[string]bool
	schemas map[string][]byte
}

// callSets is callSets(kept), shared with the last request that kept the same tools (the same
// names, in the same order, each as upstream-only or not, with the same schema bytes).
func (pl *plan) callSets(kept []policy.Tool) (map[string]bool, map[string][]byte) {
	if ks := pl.sets.Load(); ks != nil && sameCallTools(ks.kept, kept) {
		return ks.allowed, ks.schemas
	}
	own := make([]policy.Tool, len(kept))
	for i, t := range kept {
		own[i] = policy.Tool{Name: t.Name, Schema: bytes.Clone(t.Schema), UpstreamOnly: t.UpstreamOnly}
	}
	ks := &keptSets{kept: own}
	ks.allowed, ks.schemas = callSets(own)
	pl.sets.Store(ks)
	return ks.allowed, ks.schemas
}

// sameCallTools reports whether a and b make the same call sets by being the same list: what
// callSets reads of each tool is equal, in order.
func sameCallTools(a, b []policy.Tool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].UpstreamOnly != b[i].UpstreamOnly || !bytes.Equal(a[i].Schema, b[i].Schema) {
			return false
		}
	}
	return true
}

// callSets are the names a call may have (the kept tools the upstream does not run itself) and the
// schemas of their arguments (where one was declared; the last of a name's).
func callSets(kept []policy.Tool) (map[string]bool, map[string][]byte) {
	allowed := make(map[string]bool, len(kept))
	schemas := make(map[string][]byte, len(kept))
	for _, t := range kept {
		if t.UpstreamOnly {
			continue
		}
		allowed[t.Name] = true
		if len(t.Schema) > 0 {
			schemas[t.Name] = t.Schema
		}
	}
	return allowed, schemas
}

// planKey names an effective protocol of one snapshot by the definitions it is merged from; the
// pointers are the snapshot's own, so a new snapshot never finds an old plan.
type planKey struct{ base, wf *policy.Protocol }

// newPlan merges base and wf (nil when none) and compiles their rules; rules that do not compile
// are kept as the error every request of the plan fails with.
func newPlan(base, wf *policy.Protocol) *plan {
	return planOf(policy.Merge(base, wf))
}

func planOf(eff *policy.Effective) *plan {
	pl := &plan{eff: eff}
	pl.rules, pl.rulesErr = vet.CompileRules(eff.ArgRules)
	pl.flow, pl.flowErr = flow.Compile(eff.Flow...)
	if pl.flowErr == nil {
		pl.learning = pl.flow.Learning()
	}
	return pl
}

// plan returns the plan of base and wf on this snapshot, making it on first use. A nil catalog
// makes it every time.
func (c *catalog) plan(base, wf *policy.Protocol) *plan {
	if c == nil {
		return newPlan(base, wf)
	}
	k := planKey{base, wf}
	if v, ok := c.plans.Load(k); ok {
		return v.(*plan)
	}
	v, _ := c.plans.LoadOrStore(k, newPlan(base, wf))
	return v.(*plan)
}

// template returns the plan's parsed template, looked up on the snapshot c once.
func (pl *plan) template(d *Definitions, c *catalog) (*assembly.Template, error) {
	pl.tmplOnce.Do(func() {
		pl.tmpl, pl.tmplErr = d.template(c, pl.eff.Template)
		if pl.tmplErr == nil {
			pl.tmplRef = templateRef(pl.tmpl)
		}
	})
	return pl.tmpl, pl.tmplErr
}

// templateRef is a template's X-Promptgate-Template value: its name and version.
func templateRef(t *assembly.Template) string {
	return t.Name + "@" + strconv.Itoa(t.Version)
}
