package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/promptgate/promptgate/plugins/sdk"
	"github.com/promptgate/promptgate/plugins/sdk/sdktest"
)

// fake is a Source whose Gather is a function.
type fake struct {
	cfg    map[string]any
	gather func(ctx context.Context, req sdk.Request) (sdk.Response, error)
}

func (f *fake) Describe() sdk.Description {
	return sdk.Description{Name: "fake", Version: "1.0.0", Module: "memory", Fields: []string{"a"}}
}

func (f *fake) Configure(cfg map[string]any) error {
	if cfg["fail"] != nil {
		return errors.New("config: fail is set")
	}
	f.cfg = cfg
	return nil
}

func (f *fake) Gather(ctx context.Context, req sdk.Request) (sdk.Response, error) {
	return f.gather(ctx, req)
}

func answer(fields any, directives ...string) func(context.Context, sdk.Request) (sdk.Response, error) {
	return func(context.Context, sdk.Request) (sdk.Response, error) {
		return sdk.Response{Fields: fields, Directives: directives, Notes: []string{"n"}}, nil
	}
}

func TestRunRoundTrip(t *testing.T) {
	var seen sdk.Request
	src := &fake{gather: func(_ context.Context, req sdk.Request) (sdk.Response, error) {
		seen = req
		return sdk.Response{Fields: json.RawMessage(`{"z":1,"a":"line\nbreak"}`), Directives: []string{"d"}, Notes: []string{"n"}}, nil
	}}
	req := sdk.Request{Protocol: "tech", BaseProtocol: "tech", Workflow: "review", Mode: sdk.ModeFull,
		User: "u", Conversation: "c", Model: "m", LatestUser: "hi"}
	res := sdktest.Run(t, src, map[string]any{"dir": "/x", "n": 3, "nested": map[string]any{"k": []any{1, "two"}}}, req)
	if seen != req {
		t.Errorf("plugin saw %+v, want %+v", seen, req)
	}
	if string(res.Fields) != `{"z":1,"a":"line\nbreak"}` {
		t.Errorf("fields %s", res.Fields)
	}
	if len(res.Directives) != 1 || len(res.Notes) != 1 {
		t.Errorf("result %+v", res)
	}
	if src.cfg["dir"] != "/x" || src.cfg["n"] != float64(3) {
		t.Errorf("config as the plugin saw it: %v", src.cfg)
	}
}

func TestPluginOverGRPC(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		gather func(context.Context, sdk.Request) (sdk.Response, error)
		fields string
		code   codes.Code
		reason string // AnswerError.Reason
	}{
		{name: "nil fields", gather: answer(nil), fields: `{}`},
		{name: "map", gather: answer(map[string]int{"b": 2, "a": 1}), fields: `{"a":1,"b":2}`},
		{name: "struct", gather: answer(struct {
			X string `json:"x"`
		}{"y"}), fields: `{"x":"y"}`},
		{name: "array", gather: answer([]int{1}), reason: "invalid answer: fields is an array, not a JSON object"},
		{name: "string", gather: answer("s"), reason: "invalid answer: fields is a string, not a JSON object"},
		{name: "invalid utf8", gather: answer(json.RawMessage("{\"a\":\"\xff\"}")), reason: "invalid answer: invalid UTF-8"},
		{name: "lone surrogate", gather: answer(json.RawMessage(`{"a":"\ud800"}`)), reason: "invalid answer: invalid UTF-8"},
		{name: "duplicate key", gather: answer(json.RawMessage(`{"a":1,"a":2}`)), reason: "invalid answer: duplicate key"},
		{name: "too deep", gather: answer(json.RawMessage(strings.Repeat("[", 70) + strings.Repeat("]", 70))), reason: "invalid answer: nesting too deep"},
		{name: "too large", gather: answer(map[string]string{"a": strings.Repeat("x", sdk.DefaultMaxAnswerBytes)}), reason: "answer too large (over 262144 bytes)"},
		{name: "error", gather: func(context.Context, sdk.Request) (sdk.Response, error) {
			return sdk.Response{}, errors.New("backend down")
		}, code: codes.Unknown},
		{name: "panic", gather: func(context.Context, sdk.Request) (sdk.Response, error) { panic("boom") }, code: codes.Internal},
		{name: "unencodable", gather: answer(map[string]any{"f": func() {}}), code: codes.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := sdktest.New(t, &fake{gather: tc.gather}, sdktest.Options{})
			res, err := p.Gather(ctx, sdk.Request{Mode: sdk.ModeStandard})
			var ae *sdk.AnswerError
			switch {
			case tc.reason != "":
				if !errors.As(err, &ae) || ae.Reason() != tc.reason {
					t.Fatalf("err = %v, want answer error %q", err, tc.reason)
				}
			case tc.code != codes.OK:
				if status.Code(err) != tc.code {
					t.Fatalf("err = %v, want code %v", err, tc.code)
				}
			case err != nil:
				t.Fatal(err)
			case string(res.Fields) != tc.fields:
				t.Fatalf("fields %s, want %s", res.Fields, tc.fields)
			}
		})
	}
}

func TestDeadlineReachesThePlugin(t *testing.T) {
	src := &fake{gather: func(ctx context.Context, _ sdk.Request) (sdk.Response, error) {
		if _, ok := ctx.Deadline(); !ok {
			return sdk.Response{}, errors.New("no deadline")
		}
		<-ctx.Done()
		return sdk.Response{}, ctx.Err()
	}}
	p := sdktest.New(t, src, sdktest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p.Gather(ctx, sdk.Request{})
	if status.Code(err) != codes.DeadlineExceeded || time.Since(start) > 2*time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
}

func TestDescribeConfigureAndLimits(t *testing.T) {
	ctx := context.Background()
	p := sdktest.New(t, &fake{gather: answer(map[string]string{"a": strings.Repeat("x", 100)})}, sdktest.Options{MaxAnswerBytes: 64})
	d, err := p.Describe(ctx)
	if err != nil || d.Name != "fake" || d.Module != "memory" {
		t.Fatalf("describe: %+v %v", d, err)
	}
	if err := p.Configure(ctx, map[string]any{"fail": true}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "fail is set") {
		t.Fatalf("configure error: %v", err)
	}
	var ae *sdk.AnswerError
	if _, err := p.Gather(ctx, sdk.Request{}); !errors.As(err, &ae) || !ae.TooLarge || ae.Reason() != "answer too large (over 64 bytes)" {
		t.Fatalf("gather over 64 bytes: %v", err)
	}
}

func TestModeAtLeast(t *testing.T) {
	if !sdk.ModeFull.AtLeast(sdk.ModeStandard) || sdk.ModeMinimal.AtLeast(sdk.ModeStandard) ||
		!sdk.ModeStandard.AtLeast(sdk.ModeStandard) || sdk.Mode("").AtLeast(sdk.Mode("")) || sdk.Mode("x").AtLeast(sdk.ModeMinimal) {
		t.Error("Mode.AtLeast")
	}
}

func TestDecodeConfig(t *testing.T) {
	var c struct {
		Dir   string `json:"dir"`
		Limit int    `json:"limit"`
	}
	if err := sdk.DecodeConfig(map[string]any{"dir": "/x", "limit": 3}, &c); err != nil || c.Dir != "/x" || c.Limit != 3 {
		t.Errorf("%+v %v", c, err)
	}
	if err := sdk.DecodeConfig(map[string]any{"dri": "/x"}, &c); err == nil || !strings.Contains(err.Error(), "dri") {
		t.Errorf("unknown key: %v", err)
	}
	if err := sdk.DecodeConfig(nil, &c); err != nil {
		t.Errorf("nil config: %v", err)
	}
}

func TestVersionedPluginSets(t *testing.T) {
	sets := sdk.PluginSets(&sdk.GRPCPlugin{})
	if _, ok := sets[1][sdk.PluginName]; !ok || len(sets) != 1 {
		t.Errorf("plugin sets %v", sets)
	}
	if h := sdk.Handshake(); h.MagicCookieKey == "" || h.MagicCookieValue == "" || h.ProtocolVersion != 1 {
		t.Errorf("handshake %+v", h)
	}
}
