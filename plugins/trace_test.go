package plugins_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/policy/modules"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// In a traced request every source asked gets a span of its own under the context span, naming the
// source and, for one skipped, why.
func TestGatherSpanPerSource(t *testing.T) {
	hang := entry("hang", "testsource", map[string]any{"behavior": "hang"})
	hang.Timeout = 200 * time.Millisecond
	h := startHost(t, plugins.HostOptions{Trace: func(ctx context.Context) (context.Context, plugins.SourceSpan) {
		ctx, sp := tracing.Stage(ctx, tracing.SpanContextSource)
		if sp == nil {
			return ctx, nil
		}
		return ctx, sp
	}}, hang, entry("echo", "testsource", nil))

	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	ctx, server := tracing.New(tp).StartServer(context.Background(), "POST /v1/chat/completions")
	gctx, gsp := tracing.Stage(ctx, tracing.SpanContext)
	if _, err := h.Gather(gctx, gather.Query{Mode: modules.Minimal}); err != nil {
		t.Fatal(err)
	}
	gsp.End()
	server.End()

	var parent string
	for _, s := range exp.GetSpans() {
		if s.Name == tracing.SpanContext {
			parent = s.SpanContext.SpanID().String()
		}
	}
	got := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if s.Name != tracing.SpanContextSource {
			continue
		}
		if s.Parent.SpanID().String() != parent {
			t.Errorf("source span parent %s, want the context span %s", s.Parent.SpanID(), parent)
		}
		for _, a := range s.Attributes {
			if a.Key == "promptgate.source" {
				got[a.Value.AsString()] = s
			}
		}
	}
	if len(got) != 2 {
		t.Fatalf("source spans %v", got)
	}
	reason := ""
	for _, a := range got["hang"].Attributes {
		if a.Key == "promptgate.context.skip_reason" {
			reason = a.Value.AsString()
		}
	}
	if reason != "timeout" || got["hang"].Status.Code == codes.Error { // not required: skipped, not failed
		t.Errorf("hang span: reason %q status %v", reason, got["hang"].Status)
	}
	if len(got["echo"].Attributes) != 1 {
		t.Errorf("echo span attributes %v", got["echo"].Attributes)
	}

	// Untraced: no span, same answer.
	exp.Reset()
	if _, err := h.Gather(context.Background(), gather.Query{Mode: modules.Minimal}); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Errorf("%d spans without a traced request", n)
	}
}
