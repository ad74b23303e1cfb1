// Package tracing sets up promptgate's OpenTelemetry traces from the standard OTEL_* environment
// and gives the proxy its span helpers: one server span per request, a child span per pipeline
// stage. Traces are on only when an OTLP endpoint is configured (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_SDK_DISABLED is not "true"; otherwise FromEnv
// returns nil, and every helper of this package is a no-op on a nil *Tracing or outside a recording
// span, without an allocation, so an untraced request pays nothing.
//
// It owns the exporter, the tracer provider, the W3C trace-context propagator and the span names.
// It does not decide what a stage does (proxy/ does) and never records prompt text, tool arguments
// or keys: only names, versions, counts and outcome codes.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/promptgate/promptgate/proxy/telemetry/redact"
)

// The standard environment variables read by FromEnv.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	EnvServiceName    = "OTEL_SERVICE_NAME"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
	// EnvHeaders is read by the exporter itself: the headers (credentials) of every export.
	EnvHeaders = "OTEL_EXPORTER_OTLP_HEADERS"
)

// Defaults and names.
const (
	// DefaultServiceName is service.name when OTEL_SERVICE_NAME is not set.
	DefaultServiceName = "promptgate"
	// ProtocolHTTP (the default) and ProtocolGRPC are the OTLP protocols supported.
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
	// InstrumentationName names promptgate's tracer.
	InstrumentationName = "github.com/promptgate/promptgate/proxy"
	// tracesPath is appended to OTEL_EXPORTER_OTLP_ENDPOINT for OTLP/HTTP, as the specification
	// says.
	tracesPath = "/v1/traces"
)

// Span names: the server span is "METHOD PATH" (for instance "POST /v1/chat/completions"); these
// are its children, in pipeline order.
const (
	// SpanValidate: the body is one valid JSON object of the surface, the promptgate extension is
	// read.
	SpanValidate = "promptgate.validate"
	// SpanRoute: route rules, the client's choice and the default give the protocol (and workflow).
	SpanRoute = "promptgate.route"
	// SpanFilterTools: the allowed tool set is applied to the request's tools and tool_choice
	// checked.
	SpanFilterTools = "promptgate.filter_tools"
	// SpanContext: the context sources are asked, in parallel; SpanContextSource is one source.
	SpanContext       = "promptgate.context"
	SpanContextSource = "promptgate.context.source"
	// SpanFlow: the conversation is analyzed for the information-flow rules (when the protocol has
	// some).
	SpanFlow = "promptgate.flow"
	// SpanAssemble: the template, the layered prompt and the rewritten body.
	SpanAssemble = "promptgate.assemble"
	// SpanShadow: the protocol's version in shadow judges the request (when one is in shadow).
	SpanShadow = "promptgate.shadow"
	// SpanUpstream: from sending the request upstream to its response headers.
	SpanUpstream = "promptgate.upstream"
	// SpanVet: a non-stream response's tool calls are vetted; SpanRelay: a stream is relayed and
	// vetted, until it ends.
	SpanVet   = "promptgate.vet"
	SpanRelay = "promptgate.relay"
)

// Tracing is promptgate's tracer and propagator. A nil *Tracing means tracing is off.
type Tracing struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
}

// New wraps a tracer provider (tests pass one built on an in-memory exporter). Shutdown does not
// shut tp down.
func New(tp trace.TracerProvider) *Tracing {
	return &Tracing{tracer: tp.Tracer(InstrumentationName), propagator: propagation.TraceContext{}}
}

// Config is what FromEnv read from the environment.
type Config struct {
	// Endpoint is the URL spans are sent to: for OTLP/HTTP the full URL (…/v1/traces), for gRPC the
	// collector's scheme://host:port.
	Endpoint    string
	Protocol    string
	ServiceName string
}

// ConfigFromEnv reads the OTEL_* variables. ok is false when tracing is off: no endpoint, or
// OTEL_SDK_DISABLED=true. A malformed value is an error that names the variable and the fix.
func ConfigFromEnv(getenv func(string) string) (c Config, ok bool, err error) {
	if strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true") {
		return Config{}, false, nil
	}
	c.Protocol = strings.TrimSpace(getenv(EnvTracesProtocol))
	protoVar := EnvTracesProtocol
	if c.Protocol == "" {
		c.Protocol, protoVar = strings.TrimSpace(getenv(EnvProtocol)), EnvProtocol
	}
	switch c.Protocol {
	case "":
		c.Protocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolGRPC:
	default:
		return Config{}, false, fmt.Errorf("tracing: %s=%q: use %s (the default) or %s", protoVar, c.Protocol, ProtocolHTTP, ProtocolGRPC)
	}
	endpoint, endpointVar, signal := strings.TrimSpace(getenv(EnvTracesEndpoint)), EnvTracesEndpoint, true
	if endpoint == "" {
		endpoint, endpointVar, signal = strings.TrimSpace(getenv(EnvEndpoint)), EnvEndpoint, false
	}
	if endpoint == "" {
		return Config{}, false, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return Config{}, false, fmt.Errorf("tracing: %s=%q: give a URL such as http://127.0.0.1:4318 (OTLP/HTTP) or http://127.0.0.1:4317 (gRPC)", endpointVar, redact.URL(endpoint))
	}
	if u.User != nil {
		return Config{}, false, fmt.Errorf("tracing: %s=%q: the endpoint carries no user info (user:password@), which would reach logs; give credentials in %s (e.g. Authorization=Bearer ...)", endpointVar, redact.Parsed(u), EnvHeaders)
	}
	if c.Protocol == ProtocolHTTP && !signal {
		// The base endpoint gets the signal's path; the traces endpoint is used as it is.
		u.Path = strings.TrimSuffix(u.Path, "/") + tracesPath
	}
	c.Endpoint = u.String()
	c.ServiceName = strings.TrimSpace(getenv(EnvServiceName))
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	return c, true, nil
}

// FromEnv builds the OTLP exporter and tracer provider the environment asks for, or returns nil
// when tracing is off. Other OTEL_* settings the exporter and the SDK know (headers, timeout, TLS
// files, sampler, batch sizes, resource attributes) apply as the OpenTelemetry SDK reads them. Call
// Shutdown to send what is buffered.
func FromEnv(ctx context.Context, getenv func(string) string, version string) (*Tracing, Config, error) {
	c, ok, err := ConfigFromEnv(getenv)
	if err != nil || !ok {
		return nil, c, err
	}
	var exp sdktrace.SpanExporter
	if c.Protocol == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(c.Endpoint))
	} else {
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(c.Endpoint))
	}
	if err != nil {
		return nil, c, fmt.Errorf("tracing: OTLP exporter for %s: %w", c.Endpoint, err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", c.ServiceName), attribute.String("service.version", version)))
	if err != nil {
		return nil, c, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t := New(tp)
	t.shutdown = tp.Shutdown
	return t, c, nil
}

// Shutdown sends the spans still buffered and stops the exporter. It is a no-op on a nil *Tracing
// or one made by New.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Extract returns ctx with the remote span context of the client's traceparent header, if any.
func (t *Tracing) Extract(ctx context.Context, h propagation.TextMapCarrier) context.Context {
	if t == nil {
		return ctx
	}
	return t.propagator.Extract(ctx, h)
}

// Inject writes the traceparent of ctx's span into h, replacing the client's: the upstream sees
// promptgate's span as the parent. It does nothing on a nil *Tracing, leaving the client's header
// as it was.
func (t *Tracing) Inject(ctx context.Context, h propagation.TextMapCarrier) {
	if t == nil {
		return
	}
	t.propagator.Inject(ctx, h)
}

// StartServer starts the server span of one request, a child of the client's trace when ctx carries
// one (see Extract). It returns ctx unchanged and a nil *Span when t is nil.
func (t *Tracing) StartServer(ctx context.Context, name string) (context.Context, *Span) {
	if t == nil {
		return ctx, nil
	}
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
	return ctx, &Span{s: s}
}

// Span is one span; every method is a no-op on a nil *Span.
type Span struct{ s trace.Span }

// Stage starts the child span of one pipeline stage when ctx's span is recording, else returns ctx
// and nil, without allocating.
func Stage(ctx context.Context, name string) (context.Context, *Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, nil
	}
	ctx, s := parent.TracerProvider().Tracer(InstrumentationName).Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
	return ctx, &Span{s: s}
}

// Client starts the span of a call to the upstream, a child of ctx's span. Unlike Stage it starts
// one when ctx's span is not recording too (an unsampled trace still propagates its context), as
// long as t is not nil.
func (t *Tracing) Client(ctx context.Context, name string) (context.Context, *Span) {
	if t == nil {
		return ctx, nil
	}
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	return ctx, &Span{s: s}
}

// Context returns ctx with this span as the current one (ctx itself for a nil *Span).
func (s *Span) Context(ctx context.Context) context.Context {
	if s == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, s.s)
}

// Recording reports whether attributes set on the span are kept.
func (s *Span) Recording() bool { return s != nil && s.s.IsRecording() }

// Int sets an integer attribute.
func (s *Span) Int(key string, v int) {
	if s.Recording() {
		s.s.SetAttributes(attribute.Int(key, v))
	}
}

// String sets a string attribute.
func (s *Span) String(key, v string) {
	if s.Recording() {
		s.s.SetAttributes(attribute.String(key, v))
	}
}

// Bool sets a boolean attribute.
func (s *Span) Bool(key string, v bool) {
	if s.Recording() {
		s.s.SetAttributes(attribute.Bool(key, v))
	}
}

// Fail marks the span as failed with a short, non-secret code (such as the API error code), ends
// it, and returns err unchanged, so that a stage can `return nil, sp.Fail(err, code)`.
func (s *Span) Fail(err error, code string) error {
	if s != nil && err != nil {
		s.s.SetStatus(codes.Error, code)
		s.s.SetAttributes(attribute.String("error.type", code))
		s.s.End()
	}
	return err
}

// Error marks the span as failed with code without ending it.
func (s *Span) Error(code string) {
	if s != nil {
		s.s.SetStatus(codes.Error, code)
		s.s.SetAttributes(attribute.String("error.type", code))
	}
}

// End ends the span; later calls do nothing (the SDK ignores them).
func (s *Span) End() {
	if s != nil {
		s.s.End()
	}
}
