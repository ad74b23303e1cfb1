package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The gRPC names of protocol version 1.
const (
	ServiceName     = "promptgate.plugins.v1.ContextSource"
	methodDescribe  = "/" + ServiceName + "/Describe"
	methodConfigure = "/" + ServiceName + "/Configure"
	methodGather    = "/" + ServiceName + "/Gather"
)

// maxDescribeBytes caps a Describe answer.
const maxDescribeBytes = 64 << 10

// bytesValueOverhead is the most a BytesValue adds around its payload: one tag byte and a varint
// length of at most five bytes (payloads stay far below 4 GiB).
const bytesValueOverhead = 6

// contextSourceServer is the handler type of serviceDesc; *server implements it.
type contextSourceServer interface {
	describe(context.Context, *emptypb.Empty) (*wrapperspb.BytesValue, error)
	configure(context.Context, *wrapperspb.BytesValue) (*emptypb.Empty, error)
	gather(context.Context, *wrapperspb.BytesValue) (*wrapperspb.BytesValue, error)
}

// serviceDesc is the hand-written descriptor of the ContextSource service (what protoc would
// generate for a .proto with three unary methods over well-known types).
var serviceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*contextSourceServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Describe", Handler: unary(methodDescribe, func() *emptypb.Empty { return new(emptypb.Empty) }, contextSourceServer.describe)},
		{MethodName: "Configure", Handler: unary(methodConfigure, func() *wrapperspb.BytesValue { return new(wrapperspb.BytesValue) }, contextSourceServer.configure)},
		{MethodName: "Gather", Handler: unary(methodGather, func() *wrapperspb.BytesValue { return new(wrapperspb.BytesValue) }, contextSourceServer.gather)},
	},
	Streams:  []grpc.StreamDesc{},
	Metadata: "promptgate/plugins/v1/context_source.proto",
}

// unary adapts one method of contextSourceServer to a grpc.MethodDesc handler.
func unary[In, Out any](full string, newIn func() In, call func(contextSourceServer, context.Context, In) (Out, error)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := newIn()
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(contextSourceServer)
		handle := func(ctx context.Context, req any) (any, error) {
			out, err := call(s, ctx, req.(In))
			if err != nil {
				return nil, err
			}
			return out, nil
		}
		if interceptor == nil {
			return handle(ctx, in)
		}
		return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, handle)
	}
}

// server is the plugin side: it turns gRPC calls into calls of the Source.
type server struct {
	impl Source
}

var _ contextSourceServer = (*server)(nil)

func (s *server) describe(context.Context, *emptypb.Empty) (out *wrapperspb.BytesValue, err error) {
	defer recoverInto(&err)
	b, err := json.Marshal(s.impl.Describe())
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode description: %v", err)
	}
	return wrapperspb.Bytes(b), nil
}

func (s *server) configure(_ context.Context, in *wrapperspb.BytesValue) (out *emptypb.Empty, err error) {
	defer recoverInto(&err)
	var cfg map[string]any
	if len(in.GetValue()) > 0 {
		if err := json.Unmarshal(in.GetValue(), &cfg); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "config is not a JSON object: %v", err)
		}
	}
	if err := s.impl.Configure(cfg); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &emptypb.Empty{}, nil
}

func (s *server) gather(ctx context.Context, in *wrapperspb.BytesValue) (out *wrapperspb.BytesValue, err error) {
	defer recoverInto(&err)
	var req Request
	if err := json.Unmarshal(in.GetValue(), &req); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "request: %v", err)
	}
	resp, err := s.impl.Gather(ctx, req)
	if err != nil {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return nil, status.Error(codes.DeadlineExceeded, err.Error())
		case errors.Is(err, context.Canceled):
			return nil, status.Error(codes.Canceled, err.Error())
		}
		return nil, status.Error(codes.Unknown, err.Error())
	}
	b, err := encodeResponse(resp)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return wrapperspb.Bytes(b), nil
}

// encodeResponse writes the Gather answer envelope.
func encodeResponse(r Response) ([]byte, error) {
	env := struct {
		Fields     any      `json:"fields"`
		Directives []string `json:"directives,omitempty"`
		Notes      []string `json:"notes,omitempty"`
	}{r.Fields, r.Directives, r.Notes}
	if env.Fields == nil {
		env.Fields = json.RawMessage("{}")
	}
	b, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode answer: %w", err)
	}
	return b, nil
}

// recoverInto turns a panic of the Source into an Internal error, so that one bad request does
// not take the plugin process down. The stack goes to stderr, which the host logs.
func recoverInto(err *error) {
	if r := recover(); r != nil {
		fmt.Fprintf(os.Stderr, "context source panicked: %v\n%s", r, debug.Stack())
		*err = status.Error(codes.Internal, "plugin panicked")
	}
}

// Client is the host side of a context source: the go-plugin dispensed value. Plugin authors
// do not need it; the host (package plugins) and sdktest use it.
type Client struct {
	conn      *grpc.ClientConn
	maxAnswer int
}

// Describe asks the plugin who it is.
func (c *Client) Describe(ctx context.Context) (Description, error) {
	out := new(wrapperspb.BytesValue)
	if err := c.conn.Invoke(ctx, methodDescribe, &emptypb.Empty{}, out, grpc.MaxCallRecvMsgSize(maxDescribeBytes)); err != nil {
		return Description{}, err
	}
	var d Description
	if err := json.Unmarshal(out.GetValue(), &d); err != nil {
		return Description{}, fmt.Errorf("sdk: describe: invalid answer: %w", err)
	}
	return d, nil
}

// Configure hands the plugin its config map; nil sends {}.
func (c *Client) Configure(ctx context.Context, config map[string]any) error {
	if config == nil {
		config = map[string]any{}
	}
	b, err := json.Marshal(config)
	if err != nil {
		return fmt.Errorf("sdk: configure: config cannot be sent as JSON: %w", err)
	}
	return c.conn.Invoke(ctx, methodConfigure, wrapperspb.Bytes(b), new(emptypb.Empty))
}

// Gather asks the plugin for one request's context and returns its answer envelope as sent, for the
// host to check (plugins/internal/answer). An answer over the size cap is refused by gRPC as it
// arrives, from its length prefix, before it is read into memory. Errors are gRPC status errors or
// an *AnswerError with TooLarge set.
func (c *Client) Gather(ctx context.Context, req Request) ([]byte, error) {
	in, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("sdk: gather: %w", err)
	}
	max := c.MaxAnswer()
	out := new(wrapperspb.BytesValue)
	err = c.conn.Invoke(ctx, methodGather, wrapperspb.Bytes(in), out, grpc.MaxCallRecvMsgSize(max+bytesValueOverhead))
	if status.Code(err) == codes.ResourceExhausted && ctx.Err() == nil {
		return nil, &AnswerError{TooLarge: true, Max: max}
	}
	if err != nil {
		return nil, err
	}
	if v := out.GetValue(); len(v) <= max {
		return v, nil
	}
	return nil, &AnswerError{TooLarge: true, Max: max}
}

// MaxAnswer is the cap on one answer envelope, in bytes.
func (c *Client) MaxAnswer() int {
	if c.maxAnswer <= 0 {
		return DefaultMaxAnswerBytes
	}
	return c.maxAnswer
}
