package proxy

import (
	"fmt"
	"maps"

	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/store"
)

// withCandidate is the snapshot c as it would be once rec, a stored version of a protocol or
// template, were activated: rec in place of its name's active version, every other definition and
// kill switch as in c, and a protocol version in shadow taken out of shadow when it is rec (as
// activation does). The copy starts with no derived plans or frames of its own; it serves one
// preview and is then dropped.
func withCandidate(c *catalog, rec *store.Record) (*catalog, error) {
	out := &catalog{protocols: c.protocols, shadows: c.shadows, templates: c.templates, tools: c.tools, pins: c.pins}
	switch rec.Kind {
	case store.KindProtocol:
		p, err := policy.ParseProtocol(rec.Body)
		if err != nil {
			return nil, &policy.Error{Code: policy.CodeInvalidRequest, Param: "candidate",
				Message: fmt.Sprintf("candidate %s@%d does not parse: %v", store.Key(rec.Kind, rec.Name), rec.Version, err)}
		}
		p.Version = rec.Version
		out.protocols = maps.Clone(c.protocols)
		out.protocols[rec.Name] = p
		if sh, ok := c.shadows[rec.Name]; ok && sh.Version == rec.Version {
			out.shadows = maps.Clone(c.shadows)
			delete(out.shadows, rec.Name)
		}
	case store.KindTemplate:
		out.templates = maps.Clone(c.templates)
		out.templates[rec.Name] = *rec
	default:
		return nil, &policy.Error{Code: policy.CodeInvalidRequest, Param: "candidate",
			Message: fmt.Sprintf("candidate of kind %q: preview a version of a protocol or a template", rec.Kind)}
	}
	c.fallbacks.Range(func(name, _ any) bool {
		out.fallbacks.Store(name, struct{}{})
		return true
	})
	return out, nil
}
