package tracing

import (
	"context"
	"strings"
	"testing"
)

func TestConfigFromEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		ok   bool
		want Config
		err  string // a part of the error, naming the variable
	}{
		{name: "nothing set: off", env: nil},
		{name: "disabled wins", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvSDKDisabled: "TRUE"}},
		{name: "base endpoint gets /v1/traces", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318"}, ok: true,
			want: Config{Endpoint: "http://127.0.0.1:4318/v1/traces", Protocol: ProtocolHTTP, ServiceName: DefaultServiceName}},
		{name: "base endpoint with a path", env: map[string]string{EnvEndpoint: "https://collector.example/otlp/", EnvServiceName: "edge-gw", EnvSDKDisabled: "false"}, ok: true,
			want: Config{Endpoint: "https://collector.example/otlp/v1/traces", Protocol: ProtocolHTTP, ServiceName: "edge-gw"}},
		{name: "traces endpoint used as is and wins", env: map[string]string{EnvEndpoint: "http://a:4318", EnvTracesEndpoint: "http://b:9999/custom"}, ok: true,
			want: Config{Endpoint: "http://b:9999/custom", Protocol: ProtocolHTTP, ServiceName: DefaultServiceName}},
		{name: "grpc", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4317", EnvProtocol: "grpc"}, ok: true,
			want: Config{Endpoint: "http://127.0.0.1:4317", Protocol: ProtocolGRPC, ServiceName: DefaultServiceName}},
		{name: "traces protocol wins", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4317", EnvProtocol: "http/protobuf", EnvTracesProtocol: "grpc"}, ok: true,
			want: Config{Endpoint: "http://127.0.0.1:4317", Protocol: ProtocolGRPC, ServiceName: DefaultServiceName}},
		{name: "json not supported", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvProtocol: "http/json"}, err: EnvProtocol},
		{name: "unknown traces protocol", env: map[string]string{EnvEndpoint: "http://127.0.0.1:4318", EnvTracesProtocol: "udp"}, err: EnvTracesProtocol},
		{name: "no scheme", env: map[string]string{EnvEndpoint: "127.0.0.1:4318"}, err: EnvEndpoint},
		{name: "bad traces endpoint", env: map[string]string{EnvTracesEndpoint: "ftp://x/"}, err: EnvTracesEndpoint},
		{name: "query", env: map[string]string{EnvEndpoint: "http://x:1/?token=1"}, err: EnvEndpoint},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok, err := ConfigFromEnv(func(k string) string { return c.env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil || ok != c.ok || got != c.want {
				t.Fatalf("got %+v %v %v, want %+v %v", got, ok, err, c.want, c.ok)
			}
		})
	}
}

// Off means nil, and every helper is a no-op on nil.
func TestOffIsNil(t *testing.T) {
	tr, _, err := FromEnv(context.Background(), func(string) string { return "" }, "test")
	if err != nil || tr != nil {
		t.Fatalf("%v %v", tr, err)
	}
	ctx := context.Background()
	if c, sp := tr.StartServer(ctx, "x"); c != ctx || sp != nil {
		t.Fatal("span without tracing")
	}
	if c, sp := Stage(ctx, "x"); c != ctx || sp != nil {
		t.Fatal("stage span without a parent")
	}
	var sp *Span
	sp.Int("k", 1)
	sp.String("k", "v")
	sp.Bool("k", true)
	sp.Error("x")
	sp.End()
	if err := sp.Fail(context.Canceled, "x"); err != context.Canceled || sp.Recording() {
		t.Fatal(err)
	}
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// An untraced request's stages allocate nothing.
func TestStageWithoutParentAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		_, sp := Stage(ctx, SpanValidate)
		sp.Int("k", 1)
		sp.End()
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
