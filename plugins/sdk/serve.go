package sdk

import (
	"context"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// ProtocolVersion is the newest plugin protocol this package speaks.
const ProtocolVersion = 1

// PluginName is the name of the one plugin a context source program serves.
const PluginName = "context_source"

// Handshake is shared by the host and every context source. The magic cookie only keeps the
// program from being run by hand by mistake; it is not a security measure (the sha256 check and
// mutual TLS are).
func Handshake() plugin.HandshakeConfig {
	return plugin.HandshakeConfig{
		// With VersionedPlugins this is only the fallback for hosts that predate them.
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   "PROMPTGATE_CONTEXT_SOURCE",
		MagicCookieValue: "8c1f4e2a-context-source-v1",
	}
}

// GRPCPlugin is the go-plugin glue of protocol version 1. The plugin process sets Impl; the
// host sets MaxAnswerBytes and leaves Impl nil.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the source served by this process (plugin side only).
	Impl Source
	// MaxAnswerBytes caps one Gather answer (host side only); zero or negative means
	// DefaultMaxAnswerBytes.
	MaxAnswerBytes int
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the ContextSource service (plugin side).
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&serviceDesc, &server{impl: p.Impl})
	return nil
}

// GRPCClient returns a *Client on the plugin's connection (host side).
func (p *GRPCPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Client{conn: c, maxAnswer: p.MaxAnswerBytes}, nil
}

// PluginSets returns the versioned plugin sets for go-plugin's ServeConfig / ClientConfig
// VersionedPlugins: today only version 1. A protocol v2 will add {2: ...} here and keep 1.
func PluginSets(p *GRPCPlugin) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {PluginName: p},
	}
}

// Serve runs src as a context source and returns when the host tells the plugin to stop. Call it
// from main. Run by hand (without the host), the program prints a short notice and exits 1.
//
// Write logs to stderr (log.Printf, or slog with a handler on os.Stderr): the host forwards them
// to its own log at debug level. Never write to stdout; it carries the handshake.
func Serve(src Source) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake(),
		VersionedPlugins: PluginSets(&GRPCPlugin{Impl: src}),
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger: hclog.New(&hclog.LoggerOptions{
			Name:       "context-source",
			Output:     os.Stderr,
			Level:      hclog.Info,
			JSONFormat: true,
		}),
	})
}
