package plugins

import (
	"context"

	"github.com/promptgate/promptgate/proxy/tracing"
)

// tracedAsk is ask inside a span of its own (promptgate.context.source) when the request is traced: the
// source's name and, when it was skipped, why. Never the query or the answer.
func (h *Host) tracedAsk(ctx context.Context, s *slot, q Query) outcome {
	ctx, sp := tracing.Stage(ctx, tracing.SpanContextSource)
	if sp == nil {
		return h.ask(ctx, s, q)
	}
	sp.String("promptgate.source", s.cfg.Name)
	o := h.ask(ctx, s, q)
	if o.answer == nil {
		sp.String("promptgate.context.skip_reason", o.reason)
		if s.cfg.Required {
			sp.Error("context_unavailable")
		}
	}
	sp.End()
	return o
}
