package plugins

import (
	"context"

	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/plugins/internal/answer"
)

// span opens the span of a source's call through HostOptions.Trace; nil when the request is not
// traced.
func (h *Host) span(ctx context.Context) (context.Context, SourceSpan) {
	if h.opts.Trace == nil {
		return ctx, nil
	}
	return h.opts.Trace(ctx)
}

// tracedHit is hit inside a span of its own (promptgate.context.source) when the request is traced
// and the answer is in the cache: the source's name. A miss leaves no span (tracedAsk makes the
// source's).
func (h *Host) tracedHit(ctx context.Context, s *slot, q gather.Query) *answer.Answer {
	a := h.hit(s, q)
	if a == nil {
		return nil
	}
	if _, sp := h.span(ctx); sp != nil {
		sp.String("promptgate.source", s.cfg.Name)
		sp.End()
	}
	return a
}

// tracedAsk is ask inside a span of its own (promptgate.context.source) when the request is traced:
// the source's name and, when it was skipped, the class of the failure (never the plugin's
// message). Never the query or the answer.
func (h *Host) tracedAsk(ctx context.Context, s *slot, q gather.Query) outcome {
	ctx, sp := h.span(ctx)
	if sp == nil {
		return h.ask(ctx, s, q)
	}
	sp.String("promptgate.source", s.cfg.Name)
	o := h.ask(ctx, s, q)
	if o.answer == nil {
		sp.String("promptgate.context.skip_reason", o.class)
		if s.cfg.Required {
			sp.Error("context_unavailable")
		}
	}
	sp.End()
	return o
}
