// Package sdktest runs a context source in-process, over the same gRPC service and answer checks
// the proxy uses (go-plugin's TestPluginGRPCConn), so that a plugin's own `go test` sees exactly
// what the host would place in the runtime context. It owns no process management: the host
// (package plugins) does that.
//
//	func TestGather(t *testing.T) {
//		res := sdktest.Run(t, &source{}, map[string]any{"dir": t.TempDir()},
//			sdk.Request{User: "u-1", Mode: sdk.ModeStandard})
//		if string(res.Fields) != `{}` { t.Fatalf("fields = %s", res.Fields) }
//	}
package sdktest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hashicorp/go-plugin"

	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/plugins/internal/answer"
	"github.com/promptgate/promptgate/plugins/sdk"
)

// Result is one Gather answer as the host reads it.
type Result struct {
	// Fields is the source's object exactly as the host encodes it into the RUNTIME CONTEXT line
	// (compact JSON, keys in the plugin's order, line breaks and invisible characters escaped),
	// before any budget shortens it.
	Fields json.RawMessage
	// Directives and Notes as sent; the host uses directives only with trustedDirectives: true
	// and shows notes only with PROMPT_INCLUDE_COGNITIVE_NOTES=true.
	Directives []string
	Notes      []string
}

// Options tune New. The zero value is what the proxy uses by default.
type Options struct {
	// MaxAnswerBytes caps one answer as the host's HostOptions.MaxAnswerBytes does; zero or
	// negative means sdk.DefaultMaxAnswerBytes.
	MaxAnswerBytes int
}

// Plugin is a source served in-process. It is closed when the test ends.
type Plugin struct {
	client *sdk.Client
}

// New serves src in-process over gRPC and connects to it. It does not call Configure.
func New(t testing.TB, src sdk.Source, opts Options) *Plugin {
	t.Helper()
	set := sdk.PluginSets(&sdk.GRPCPlugin{Impl: src, MaxAnswerBytes: opts.MaxAnswerBytes})[sdk.ProtocolVersion]
	client, server := plugin.TestPluginGRPCConn(t, false, set)
	t.Cleanup(func() {
		// Server first: client.Close asks the server to stop too, which would race with a
		// second Stop; on a stopped server that request just fails.
		server.Stop()
		_ = client.Close()
	})
	raw, err := client.Dispense(sdk.PluginName)
	if err != nil {
		t.Fatalf("sdktest: dispense: %v", err)
	}
	return &Plugin{client: raw.(*sdk.Client)}
}

// Describe calls Describe over gRPC.
func (p *Plugin) Describe(ctx context.Context) (sdk.Description, error) {
	return p.client.Describe(ctx)
}

// Configure calls Configure over gRPC with the map as the proxy would send it (through JSON).
func (p *Plugin) Configure(ctx context.Context, config map[string]any) error {
	return p.client.Configure(ctx, config)
}

// Gather calls Gather over gRPC and checks the answer as the host does. The error is a gRPC
// status error (the plugin's own error, or its deadline) or an *sdk.AnswerError (the answer would
// be skipped: too large, invalid UTF-8, fields not an object, ...).
func (p *Plugin) Gather(ctx context.Context, req sdk.Request) (Result, error) {
	raw, err := p.client.Gather(ctx, req)
	if err != nil {
		return Result{}, err
	}
	a, err := answer.Decode(raw, p.client.MaxAnswer())
	if err != nil {
		return Result{}, err
	}
	return Result{Fields: ctxjson.Encode(a.Fields), Directives: a.Directives, Notes: a.Notes}, nil
}

// Run is New, Configure and one Gather; any error fails the test.
func Run(t testing.TB, src sdk.Source, config map[string]any, req sdk.Request) Result {
	t.Helper()
	p := New(t, src, Options{})
	ctx := t.Context()
	if err := p.Configure(ctx, config); err != nil {
		t.Fatalf("sdktest: configure: %v", err)
	}
	res, err := p.Gather(ctx, req)
	if err != nil {
		t.Fatalf("sdktest: gather: %v", err)
	}
	return res
}
