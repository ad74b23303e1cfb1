package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/mcp"
	"github.com/promptgate/promptgate/proxy/mitm"
)

// keyHash is sha256("test"), the value the contract's example abbreviates as "9f86d0...".
const keyHash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

// binHash stands for a plugin binary's checksum.
const binHash = "e19866fcddb6bdb5ff2831b813c2a1cf28a5d15f6a7071b2b1e8a9f79c2178fa"

// contractExample is the config of CONTRACT.md ("Definitions the operator writes") with real
// checksums, plus its mitm key.
const contractExample = `defaultProtocol: neutral
routes:                       # first match wins
  - match: {apiKeySha256: "` + keyHash + `", header: {X-Team: payments}, model: "gpt-4o*", path: /v1/chat/completions}
    protocol: private
    allowClientProtocol: false
tools:                        # access policy and runtime enablement, across protocols
  observe_user: {scope: observer, allowedProtocols: [private, system]}
  web_fetch: {enabled: true}
plugins:
  - {name: memory, path: ./bin/memory-source, sha256: "` + binHash + `", module: memory, minMode: standard,
     timeout: 150ms, required: false, cacheTTL: 30s}
limits: {maxBodyBytes: 10485760, maxJSONDepth: 64, upstreamTimeout: 120s}
mitm: {caCert: DIR/ca.crt, caKey: DIR/ca.key, hosts: [api.openai.com], passthrough: true, upstreamCA: extra-roots.pem}
`

func ptr[T any](v T) *T { return &v }

// defaults is what a file that sets nothing means.
func defaults() *File {
	return &File{
		Config: policy.Config{DefaultProtocol: "neutral"},
		Limits: proxy.Limits{MaxBodyBytes: 10 << 20, MaxJSONDepth: 64, UpstreamTimeout: 120 * time.Second, BodyReadTimeout: 60 * time.Second, HeaderReadTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, MaxInFlight: 1024, MaxTools: 1024},
		Listen: guard.Config{Section: "listen"},
		Audit:  audit.Config{RingSize: 10000},
		MCP:    mcp.Config{OnDefinitionChange: "block", JoinWindow: 10 * time.Minute, UnknownMethods: "refuse"},
	}
}

func TestDefaultConstants(t *testing.T) {
	// The contract and the seed fix these values; a change here is a change of observable
	// behaviour.
	if mitm.DefaultHandshakeTimeout != 10*time.Second {
		t.Errorf("mitm.DefaultHandshakeTimeout %v, want 10s", mitm.DefaultHandshakeTimeout)
	}
	if policy.DefaultProtocol != "neutral" || proxy.DefaultMaxBodyBytes != 10485760 || proxy.DefaultMaxJSONDepth != 64 ||
		proxy.DefaultUpstreamTimeout != 120*time.Second || plugins.DefaultTimeout != 150*time.Millisecond ||
		plugins.DefaultCacheTTL != 30*time.Second || plugins.DefaultMinMode != "minimal" || audit.DefaultRingSize != 10000 {
		t.Fatalf("defaults changed: %q %d %d %v %v %v %q", policy.DefaultProtocol, proxy.DefaultMaxBodyBytes, proxy.DefaultMaxJSONDepth,
			proxy.DefaultUpstreamTimeout, plugins.DefaultTimeout, plugins.DefaultCacheTTL, plugins.DefaultMinMode)
	}
}

func TestParseContractExample(t *testing.T) {
	got, err := Parse([]byte(contractExample))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &File{
		Config: policy.Config{
			DefaultProtocol: "neutral",
			Routes: []policy.Route{{
				Match: policy.Match{
					APIKeySha256: keyHash,
					Header:       map[string]string{"X-Team": "payments"},
					Model:        "gpt-4o*",
					Path:         "/v1/chat/completions",
				},
				Protocol:            "private",
				AllowClientProtocol: ptr(false),
			}},
			Tools: map[string]policy.ToolConfig{
				"observe_user": {Scope: "observer", AllowedProtocols: []string{"private", "system"}},
				"web_fetch":    {Enabled: ptr(true)},
			},
		},
		Plugins: []plugins.Spec{{
			Name: "memory", Path: "./bin/memory-source", SHA256: binHash, Module: "memory", MinMode: "standard",
			Timeout: 150 * time.Millisecond, Required: false, CacheTTL: 30 * time.Second,
		}},
		Limits: proxy.Limits{MaxBodyBytes: 10 << 20, MaxJSONDepth: 64, UpstreamTimeout: 120 * time.Second, BodyReadTimeout: 60 * time.Second, HeaderReadTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second, MaxInFlight: 1024, MaxTools: 1024},
		Listen: guard.Config{Section: "listen"},
		Audit:  audit.Config{RingSize: 10000},
		MCP:    mcp.Config{OnDefinitionChange: "block", JoinWindow: 10 * time.Minute, UnknownMethods: "refuse"},
		MITM: &mitm.Config{
			CACert: "DIR/ca.crt", CAKey: "DIR/ca.key", Hosts: []string{"api.openai.com"},
			Passthrough: ptr(true), UpstreamCA: "extra-roots.pem", HandshakeTimeout: 10 * time.Second,
			MaxTunnels: mitm.DefaultMaxTunnels, TunnelIdleTimeout: mitm.DefaultTunnelIdleTimeout,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse(contract example)\n got %#v\nwant %#v", got, want)
	}
	if got.Routes[0].AllowClientProtocol == nil || *got.Routes[0].AllowClientProtocol {
		t.Errorf("allowClientProtocol: false must stay an explicit false, got %v", got.Routes[0].AllowClientProtocol)
	}
}

func TestParseDefaults(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want *File
	}{
		{"empty file", "", defaults()},
		{"only a newline", "\n", defaults()},
		{"only comments", "# nothing configured yet\n   # still nothing\n", defaults()},
		{"empty mapping", "{}\n", defaults()},
		{"explicit nulls", "defaultProtocol:\nroutes:\nlimits:\n", defaults()},
		{"zeros mean defaults", "limits: {maxBodyBytes: 0, maxJSONDepth: 0, upstreamTimeout: 0s}\n", defaults()},
		{
			"other default protocol", "defaultProtocol: tech\n",
			func() *File { f := defaults(); f.DefaultProtocol = "tech"; return f }(),
		},
		{
			"limits given are kept", "limits: {maxBodyBytes: 1024, maxJSONDepth: 8, upstreamTimeout: 2m}\n",
			func() *File {
				f := defaults()
				f.Limits.MaxBodyBytes, f.Limits.MaxJSONDepth, f.Limits.UpstreamTimeout = 1024, 8, 2*time.Minute
				return f
			}(),
		},
		{
			"listener limits and listen section", "limits: {bodyReadTimeout: 5m, headerReadTimeout: 2s, idleTimeout: 30s, maxInFlight: 64}\nlisten: {hosts: [gateway.internal, '*.svc.cluster.local'], allowedOrigins: ['https://app.example.com']}\n",
			func() *File {
				f := defaults()
				f.Limits.BodyReadTimeout, f.Limits.HeaderReadTimeout, f.Limits.IdleTimeout, f.Limits.MaxInFlight = 5*time.Minute, 2*time.Second, 30*time.Second, 64
				f.Listen = guard.Config{Hosts: []string{"gateway.internal", "*.svc.cluster.local"}, AllowedOrigins: []string{"https://app.example.com"}, Section: "listen"}
				return f
			}(),
		},
		{
			"partial limits", "limits: {maxJSONDepth: 10}\n",
			func() *File { f := defaults(); f.Limits.MaxJSONDepth = 10; return f }(),
		},
		{
			"plugin defaults", "plugins:\n  - {name: memory, path: ./m, sha256: " + binHash + "}\n",
			func() *File {
				f := defaults()
				f.Plugins = []plugins.Spec{{
					Name: "memory", Path: "./m", SHA256: binHash,
					MinMode: "minimal", Timeout: 150 * time.Millisecond, CacheTTL: 30 * time.Second,
				}}
				return f
			}(),
		},
		{
			"plugin values given are kept",
			"plugins:\n  - name: notes\n    path: ./n\n    sha256: " + strings.ToUpper(binHash) + "\n    minMode: full\n" +
				"    timeout: 2s\n    cacheTTL: 1m\n    required: true\n    receiveUserMessage: true\n    trustedDirectives: true\n" +
				"    config: {dir: /var/notes, n: 3}\n",
			func() *File {
				f := defaults()
				f.Plugins = []plugins.Spec{{
					Name: "notes", Path: "./n", SHA256: strings.ToUpper(binHash), MinMode: "full",
					Timeout: 2 * time.Second, CacheTTL: time.Minute, Required: true,
					ReceiveUserMessage: true, TrustedDirectives: true,
					Config: map[string]any{"dir": "/var/notes", "n": 3},
				}}
				return f
			}(),
		},
		{
			"mitm passthrough defaults to true", "mitm: {caCert: c.crt, caKey: c.key, hosts: [api.openai.com]}\n",
			func() *File {
				f := defaults()
				f.MITM = &mitm.Config{CACert: "c.crt", CAKey: "c.key", Hosts: []string{"api.openai.com"}, Passthrough: ptr(true), HandshakeTimeout: 10 * time.Second,
					MaxTunnels: mitm.DefaultMaxTunnels, TunnelIdleTimeout: mitm.DefaultTunnelIdleTimeout}
				return f
			}(),
		},
		{
			"mitm passthrough false is kept", "mitm: {caCert: c.crt, caKey: c.key, passthrough: false}\n",
			func() *File {
				f := defaults()
				f.MITM = &mitm.Config{CACert: "c.crt", CAKey: "c.key", Passthrough: ptr(false), HandshakeTimeout: 10 * time.Second,
					MaxTunnels: mitm.DefaultMaxTunnels, TunnelIdleTimeout: mitm.DefaultTunnelIdleTimeout}
				return f
			}(),
		},
		{
			"mitm door hardening given is kept",
			"mitm: {caCert: c.crt, caKey: c.key, allowPrivateDestinations: [127.0.0.1, '::1', models.internal, Local-Model.], handshakeTimeout: 2s, maxTunnels: 16, tunnelIdleTimeout: 1m}\n",
			func() *File {
				f := defaults()
				f.MITM = &mitm.Config{CACert: "c.crt", CAKey: "c.key", Passthrough: ptr(true), HandshakeTimeout: 2 * time.Second,
					AllowPrivateDestinations: []string{"127.0.0.1", "::1", "models.internal", "Local-Model."},
					MaxTunnels:               16, TunnelIdleTimeout: time.Minute}
				return f
			}(),
		},
		{
			"route defaults: allowClientProtocol unset, empty match", "routes:\n  - protocol: public\n",
			func() *File { f := defaults(); f.Routes = []policy.Route{{Protocol: "public"}}; return f }(),
		},
		{
			"route allowClientProtocol true", "routes:\n  - {protocol: tech, allowClientProtocol: true, match: {model: 'o*'}}\n",
			func() *File {
				f := defaults()
				f.Routes = []policy.Route{{Protocol: "tech", AllowClientProtocol: ptr(true), Match: policy.Match{Model: "o*"}}}
				return f
			}(),
		},
		{
			"tool kill switch", "tools:\n  web_fetch: {enabled: false}\n",
			func() *File {
				f := defaults()
				f.Tools = map[string]policy.ToolConfig{"web_fetch": {Enabled: ptr(false)}}
				return f
			}(),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.yaml, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%q)\n got %#v\nwant %#v", tc.yaml, got, tc.want)
			}
			if tc.want.MITM == nil && got.MITM != nil {
				t.Errorf("mitm must stay nil (proxy door off) when not configured, got %#v", got.MITM)
			}
		})
	}
}

// problems splits an error made by errors.Join (or a single error) into its messages.
func problems(err error) []string {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			out = append(out, problems(e)...)
		}
		return out
	}
	return []string{err.Error()}
}

const validPlugin = "{name: memory, path: ./m, sha256: " + binHash + "}"

func TestParseErrors(t *testing.T) {
	hexHelp := "must be 64 lowercase hex characters (sha256 of the API key, e.g. `printf %s \"$KEY\" | sha256sum`)"
	tests := []struct {
		name string
		yaml string
		want []string // every problem, exactly, in order
	}{
		// Unknown keys, at every level, with the line and the valid keys.
		{
			"unknown top-level key", "defaultProtocol: tech\nroute: []\n",
			[]string{`line 2: unknown key "route" in the top level; valid keys: defaultProtocol, routes, tools, plugins, limits, listen, mitm, audit, security, mcp`},
		},
		{
			"unknown key in a route's match", "routes:\n  - protocol: tech\n    match: {modle: gpt-4o}\n",
			[]string{`line 3: unknown key "modle" in a route's match; valid keys: apiKeySha256, header, model, path`},
		},
		{
			"unknown key in a route", "routes:\n  - protocol: tech\n\n    allowClient: true\n",
			[]string{`line 4: unknown key "allowClient" in a route; valid keys: match, protocol, allowClientProtocol`},
		},
		{
			"unknown key in a plugin", "plugins:\n  - name: memory\n    path: ./m\n    sha256: " + binHash + "\n    timeOut: 1s\n",
			[]string{`line 5: unknown key "timeOut" in a plugin entry; valid keys: name, path, sha256, module, minMode, timeout, required, cacheTTL, config, receiveUserMessage, trustedDirectives, lists`},
		},
		{
			"unknown key in limits", "# limits\nlimits:\n  maxBodyBytes: 10\n  maxBodySize: 10\n",
			[]string{`line 4: unknown key "maxBodySize" in limits; valid keys: maxBodyBytes, maxJSONDepth, upstreamTimeout, bodyReadTimeout, headerReadTimeout, idleTimeout, maxInFlight, maxTools`},
		},
		{
			"unknown key in mitm", "mitm: {caCert: a, caKey: b, host: [api.openai.com]}\n",
			[]string{`line 1: unknown key "host" in mitm; valid keys: caCert, caKey, hosts, passthrough, upstreamCA, allowPrivateDestinations, handshakeTimeout, maxTunnels, tunnelIdleTimeout`},
		},
		{
			"unknown key in a tool entry", "tools:\n  web_fetch: {enable: false}\n",
			[]string{`line 2: unknown key "enable" in a tool entry; valid keys: enabled, scope, allowedProtocols`},
		},
		{
			"unknown key with a space", "default protocol: tech\n",
			[]string{`line 1: unknown key "default protocol" in the top level; valid keys: defaultProtocol, routes, tools, plugins, limits, listen, mitm, audit, security, mcp`},
		},
		{
			"keys are case-sensitive", "DefaultProtocol: tech\n",
			[]string{`line 1: unknown key "DefaultProtocol" in the top level; valid keys: defaultProtocol, routes, tools, plugins, limits, listen, mitm, audit, security, mcp`},
		},
		{
			"several unknown keys", "bogus: 1\nlimits: {maxBodyBytes: 1, nope: 2}\nmitm: {caCert: a, caKey: b, x: 1}\n",
			[]string{
				`line 1: unknown key "bogus" in the top level; valid keys: defaultProtocol, routes, tools, plugins, limits, listen, mitm, audit, security, mcp`,
				`line 2: unknown key "nope" in limits; valid keys: maxBodyBytes, maxJSONDepth, upstreamTimeout, bodyReadTimeout, headerReadTimeout, idleTimeout, maxInFlight, maxTools`,
				`line 3: unknown key "x" in mitm; valid keys: caCert, caKey, hosts, passthrough, upstreamCA, allowPrivateDestinations, handshakeTimeout, maxTunnels, tunnelIdleTimeout`,
			},
		},

		// Values of the wrong type name the key path and what to write instead.
		{
			"string for maxBodyBytes", "limits:\n  maxBodyBytes: ten\n",
			[]string{`line 2: limits.maxBodyBytes: got a string "ten", want a whole number`},
		},
		{
			"quoted number for maxJSONDepth", "limits: {maxJSONDepth: \"64\"}\n",
			[]string{`line 1: limits.maxJSONDepth: got a string "64", want a whole number`},
		},
		{
			"duration without a unit", "limits:\n  upstreamTimeout: 120\n",
			[]string{`line 2: limits.upstreamTimeout: got a number "120", want a duration with a unit, e.g. 150ms or 30s`},
		},
		{
			"mitm handshakeTimeout without a unit", "mitm:\n  handshakeTimeout: 10\n",
			[]string{`line 2: mitm.handshakeTimeout: got a number "10", want a duration with a unit, e.g. 150ms or 30s`},
		},
		{
			"mitm allowPrivateDestinations not a list", "mitm:\n  allowPrivateDestinations: 127.0.0.1\n",
			[]string{`line 2: mitm.allowPrivateDestinations: got a string "127.0.0.1", want a list, e.g. [a, b]`},
		},
		{
			"two bad durations on one line", "plugins:\n  - {name: m, path: ./m, sha256: " + binHash + ", timeout: 5, cacheTTL: 5}\n",
			[]string{
				`line 2: plugins[0].timeout: got a number "5", want a duration with a unit, e.g. 150ms or 30s`,
				`line 2: plugins[0].cacheTTL: got a number "5", want a duration with a unit, e.g. 150ms or 30s`,
			},
		},
		{
			"bad duration string", "plugins:\n  - name: m\n    timeout: soon\n",
			[]string{`line 3: plugins[0].timeout: got a string "soon", want a duration with a unit, e.g. 150ms or 30s`},
		},
		{
			"not a boolean", "tools:\n  web_fetch: {enabled: maybe}\n",
			[]string{`line 2: tools.web_fetch.enabled: got a string "maybe", want true or false`},
		},
		{
			"mapping for a list", "plugins: {name: memory}\n",
			[]string{`line 1: plugins: got a mapping, want a list, e.g. [a, b]`},
		},
		{
			"list for a mapping", "routes:\n  - protocol: tech\n    match:\n      header: [X-Team]\n",
			[]string{`line 4: routes[0].match.header: got a list, want a mapping of key: value`},
		},
		{
			"mapping inside a list of strings", "mitm: {caCert: a, caKey: b, hosts: [api.openai.com, {h: x}]}\n",
			[]string{`line 1: mitm.hosts[1]: got a mapping, want a string (quote it)`},
		},
		{
			"long value is named by its key", "limits: {maxBodyBytes: 10485760bytes}\n",
			[]string{`line 1: limits.maxBodyBytes: got a string "1048576...", want a whole number`},
		},
		{
			"the file is a list", "- defaultProtocol: tech\n",
			[]string{`line 1: the top level: got a list, want a mapping of key: value`},
		},
		{
			"unknown key and a wrong type are both reported", "bogus: 1\nlimits: {maxBodyBytes: ten, nope: 2}\n",
			[]string{
				`line 1: unknown key "bogus" in the top level; valid keys: defaultProtocol, routes, tools, plugins, limits, listen, mitm, audit, security, mcp`,
				`line 2: limits.maxBodyBytes: got a string "ten", want a whole number`,
				`line 2: unknown key "nope" in limits; valid keys: maxBodyBytes, maxJSONDepth, upstreamTimeout, bodyReadTimeout, headerReadTimeout, idleTimeout, maxInFlight, maxTools`,
			},
		},

		// Invalid values found by Validate.
		{
			"bad default protocol", "defaultProtocol: 'neu tral'\n",
			[]string{`defaultProtocol: "neu tral" is not a protocol id (letters, digits, _ . -)`},
		},
		{
			"route without protocol", "routes:\n  - match: {model: gpt-4o}\n",
			[]string{`routes[0].protocol: missing: name the protocol this route selects`},
		},
		{
			"route with a bad protocol id", "routes:\n  - {protocol: tech}\n  - {protocol: 'te/ch'}\n",
			[]string{`routes[1].protocol: "te/ch" is not a protocol id`},
		},
		{
			"apiKeySha256 too short", "routes:\n  - {protocol: tech, match: {apiKeySha256: 9f86d0}}\n",
			[]string{`routes[0].match.apiKeySha256: ` + hexHelp},
		},
		{
			"apiKeySha256 uppercase", "routes:\n  - {protocol: tech, match: {apiKeySha256: " + strings.ToUpper(keyHash) + "}}\n",
			[]string{`routes[0].match.apiKeySha256: ` + hexHelp},
		},
		{
			"apiKeySha256 not hex", "routes:\n  - {protocol: tech, match: {apiKeySha256: " + strings.Repeat("g", 64) + "}}\n",
			[]string{`routes[0].match.apiKeySha256: ` + hexHelp},
		},
		{
			"apiKeySha256 with a prefix", "routes:\n  - {protocol: tech, match: {apiKeySha256: 'sha256:" + keyHash + "'}}\n",
			[]string{`routes[0].match.apiKeySha256: ` + hexHelp},
		},
		{
			"bad model glob", "routes:\n  - {protocol: tech, match: {model: 'gpt-[4'}}\n",
			[]string{`routes[0].match.model: bad glob "gpt-[4": syntax error in pattern`},
		},
		{
			"bad path glob", "routes:\n  - {protocol: tech, match: {path: '/v1/*\\'}}\n",
			[]string{`routes[0].match.path: bad glob "/v1/*\\": syntax error in pattern`},
		},
		{
			"bad header glob", "routes:\n  - {protocol: tech, match: {header: {X-Team: '[pay'}}}\n",
			[]string{`routes[0].match.header.X-Team: bad glob "[pay": syntax error in pattern`},
		},
		{
			"bad header name", "routes:\n  - {protocol: tech, match: {header: {'X Team': payments}}}\n",
			[]string{`routes[0].match.header: "X Team" is not a header name`},
		},
		{
			"bad allowedProtocols entry", "tools:\n  observe_user: {allowedProtocols: [private, 'a b']}\n",
			[]string{`tools.observe_user.allowedProtocols[1]: "a b" is not a protocol id`},
		},
		{
			"plugin without name", "plugins:\n  - {path: ./m, sha256: " + binHash + "}\n",
			[]string{`plugins[0].name: missing: the plugin's key in the runtime context JSON`},
		},
		{
			"plugin without path", "plugins:\n  - {name: memory, sha256: " + binHash + "}\n",
			[]string{`plugins[0] (memory).path: missing: the plugin binary`},
		},
		{
			"plugin without sha256", "plugins:\n  - {name: memory, path: ./bin/m}\n",
			[]string{`plugins[0] (memory).sha256: required: the binary's sha256 as 64 hex characters (sha256sum ./bin/m)`},
		},
		{
			"plugin with a short sha256", "plugins:\n  - {name: memory, path: ./bin/m, sha256: '...'}\n",
			[]string{`plugins[0] (memory).sha256: required: the binary's sha256 as 64 hex characters (sha256sum ./bin/m)`},
		},
		{
			"plugin with a bad name", "plugins:\n  - {name: 'my memory', path: ./m, sha256: " + binHash + "}\n",
			[]string{`plugins[0] (my memory).name: "my memory": use letters, digits, _ . -`},
		},
		{
			"duplicate plugin names", "plugins:\n  - " + validPlugin + "\n  - {name: notes, path: ./n, sha256: " + binHash + "}\n  - " + validPlugin + "\n",
			[]string{`plugins[2] (memory).name: duplicate plugin name "memory"`},
		},
		{
			"reserved plugin name meta", "plugins:\n  - {name: meta, path: ./m, sha256: " + binHash + "}\n",
			[]string{`plugins[0] (meta).name: "meta" is reserved in the runtime context JSON; choose another name`},
		},
		{
			"reserved plugin name request", "plugins:\n  - {name: request, path: ./m, sha256: " + binHash + "}\n",
			[]string{`plugins[0] (request).name: "request" is reserved in the runtime context JSON; choose another name`},
		},
		{
			"bad minMode", "plugins:\n  - {name: memory, path: ./m, sha256: " + binHash + ", minMode: max}\n",
			[]string{`plugins[0] (memory).minMode: "max": use minimal, standard or full`},
		},
		{
			"minMode is case-sensitive", "plugins:\n  - {name: memory, path: ./m, sha256: " + binHash + ", minMode: Full}\n",
			[]string{`plugins[0] (memory).minMode: "Full": use minimal, standard or full`},
		},
		{
			"negative plugin timeout", "plugins:\n  - {name: memory, path: ./m, sha256: " + binHash + ", timeout: -150ms}\n",
			[]string{`plugins[0] (memory).timeout: must be positive, e.g. 150ms`},
		},
		{
			"negative plugin cacheTTL", "plugins:\n  - {name: memory, path: ./m, sha256: " + binHash + ", cacheTTL: -1s}\n",
			[]string{`plugins[0] (memory).cacheTTL: must be zero or positive, e.g. 30s`},
		},
		{
			"negative upstreamTimeout", "limits: {upstreamTimeout: -2m}\n",
			[]string{`limits.upstreamTimeout: must be positive, e.g. 120s`},
		},
		{
			"negative maxBodyBytes", "limits: {maxBodyBytes: -1}\n",
			[]string{`limits.maxBodyBytes: must be positive, e.g. 10485760`},
		},
		{
			"negative maxJSONDepth", "limits: {maxJSONDepth: -1}\n",
			[]string{`limits.maxJSONDepth: must be between 1 and 10000, e.g. 64`},
		},
		{
			"maxJSONDepth too large", "limits: {maxJSONDepth: 10001}\n",
			[]string{`limits.maxJSONDepth: must be between 1 and 10000, e.g. 64`},
		},
		{
			"negative listener limits", "limits: {bodyReadTimeout: -1s, headerReadTimeout: -1s, idleTimeout: -1s, maxInFlight: -1}\n",
			[]string{
				`limits.bodyReadTimeout: must be positive, e.g. 60s`,
				`limits.headerReadTimeout: must be positive, e.g. 10s`,
				`limits.idleTimeout: must be positive, e.g. 120s`,
				`limits.maxInFlight: must be positive, e.g. 1024`,
			},
		},
		{
			"negative tools cap", "limits: {maxTools: -1}\n",
			[]string{`limits.maxTools: must be positive, e.g. 1024`},
		},
		{
			"bad listen hosts and origins", "listen: {hosts: [gateway.internal, 'http://x.example', '*', 'x.example:8787'], allowedOrigins: ['https://app.example.com', '*', 'https://app.example.com/path']}\n",
			[]string{ // sorted by key path
				`listen.allowedOrigins[1]: "*": give an origin as a browser sends it, scheme://host[:port], e.g. https://app.example.com (no wildcard, no path)`,
				`listen.allowedOrigins[2]: "https://app.example.com/path": give an origin as a browser sends it, scheme://host[:port], e.g. https://app.example.com (no wildcard, no path)`,
				`listen.hosts[1]: "http://x.example": give a host name only, without a scheme, port or path, e.g. gateway.internal`,
				`listen.hosts[2]: "*": give a host name or an IP address, or *.example.com for the names under example.com`,
				`listen.hosts[3]: "x.example:8787": give a host name only, without a scheme, port or path, e.g. gateway.internal`,
			},
		},
		{
			"problems of map entries come sorted, not in map order",
			"tools:\n  zeta: {allowedProtocols: ['z z']}\n  alpha: {allowedProtocols: ['a a']}\n  mid: {allowedProtocols: ['m m']}\n" +
				"routes:\n" + strings.Repeat("  - {protocol: tech}\n", 10) + "  - {protocol: 'te ch'}\n  - {protocol: 'x y'}\n",
			[]string{
				`routes[10].protocol: "te ch" is not a protocol id`,
				`routes[11].protocol: "x y" is not a protocol id`,
				`tools.alpha.allowedProtocols[0]: "a a" is not a protocol id`,
				`tools.mid.allowedProtocols[0]: "m m" is not a protocol id`,
				`tools.zeta.allowedProtocols[0]: "z z" is not a protocol id`,
			},
		},
		{
			"mitm without CA", "mitm: {hosts: [api.openai.com]}\n",
			[]string{
				"mitm.caCert: missing: the CA certificate written by `promptgate ca init`",
				"mitm.caKey: missing: the CA key written by `promptgate ca init`",
			},
		},
		{
			"mitm host with a port", "mitm: {caCert: a, caKey: b, hosts: [api.openai.com, 'api.anthropic.com:443', '']}\n",
			[]string{
				`mitm.hosts[1]: "api.anthropic.com:443": give a host name only, e.g. api.openai.com`,
				`mitm.hosts[2]: "": give a host name only, e.g. api.openai.com`,
			},
		},
		{
			"mitm allowPrivateDestinations not a host or IP",
			"mitm: {caCert: a, caKey: b, allowPrivateDestinations: ['127.0.0.1:11434', 'http://models.internal', '', 'fe80::1%eth0', 'a b', 10.0.0.0/8]}\n",
			[]string{
				`mitm.allowPrivateDestinations[0]: "127.0.0.1:11434": give a host name or an IP address without a port, e.g. 127.0.0.1 or models.internal`,
				`mitm.allowPrivateDestinations[1]: "http://models.internal": give a host name or an IP address without a port, e.g. 127.0.0.1 or models.internal`,
				`mitm.allowPrivateDestinations[2]: "": give a host name or an IP address without a port, e.g. 127.0.0.1 or models.internal`,
				`mitm.allowPrivateDestinations[3]: "fe80::1%eth0": give a host name or an IP address without a port, e.g. 127.0.0.1 or models.internal`,
				`mitm.allowPrivateDestinations[4]: "a b": give a host name or an IP address without a port, e.g. 127.0.0.1 or models.internal`,
				`mitm.allowPrivateDestinations[5]: "10.0.0.0/8": give a host name or an IP address without a port, e.g. 127.0.0.1 or models.internal`,
			},
		},
		{
			"mitm negative handshakeTimeout", "mitm: {caCert: a, caKey: b, handshakeTimeout: -1s}\n",
			[]string{`mitm.handshakeTimeout: must be positive, e.g. 10s`},
		},
		{
			"several problems at once, sorted by key path",
			"defaultProtocol: 'a b'\n" +
				"routes:\n  - match: {apiKeySha256: abc, model: '['}\n" +
				"plugins:\n  - {name: meta, sha256: nope, minMode: huge, timeout: -1s, cacheTTL: -1s}\n  - {name: x, path: ./x, sha256: " + binHash + "}\n  - {name: x, path: ./x, sha256: " + binHash + "}\n" +
				"limits: {maxBodyBytes: -5, maxJSONDepth: 20000, upstreamTimeout: -1s}\n" +
				"mitm: {caKey: k}\n",
			[]string{
				`defaultProtocol: "a b" is not a protocol id (letters, digits, _ . -)`,
				`limits.maxBodyBytes: must be positive, e.g. 10485760`,
				`limits.maxJSONDepth: must be between 1 and 10000, e.g. 64`,
				`limits.upstreamTimeout: must be positive, e.g. 120s`,
				"mitm.caCert: missing: the CA certificate written by `promptgate ca init`",
				`plugins[0] (meta).cacheTTL: must be zero or positive, e.g. 30s`,
				`plugins[0] (meta).minMode: "huge": use minimal, standard or full`,
				`plugins[0] (meta).name: "meta" is reserved in the runtime context JSON; choose another name`,
				`plugins[0] (meta).path: missing: the plugin binary`,
				`plugins[0] (meta).sha256: required: the binary's sha256 as 64 hex characters (sha256sum )`,
				`plugins[0] (meta).timeout: must be positive, e.g. 150ms`,
				`plugins[2] (x).name: duplicate plugin name "x"`,
				`routes[0].match.apiKeySha256: ` + hexHelp,
				`routes[0].match.model: bad glob "[": syntax error in pattern`,
				`routes[0].protocol: missing: name the protocol this route selects`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatalf("Parse(%q) = %#v, want an error", tc.yaml, f)
			}
			if f != nil {
				t.Errorf("Parse returned a file with its error: %#v", f)
			}
			got := problems(err)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Parse(%q) problems:\n got %q\nwant %q", tc.yaml, got, tc.want)
			}
			if err.Error() != strings.Join(tc.want, "\n") {
				t.Errorf("Error() = %q, want the problems one a line", err.Error())
			}
		})
	}
}

func TestParseInvalidYAML(t *testing.T) {
	for _, src := range []string{
		"routes: [\n",
		"limits: {maxBodyBytes: 1\n",
		"\tdefaultProtocol: tech\n",
		"a: b: c\n",
	} {
		_, err := Parse([]byte(src))
		if err == nil || !strings.HasPrefix(err.Error(), "invalid YAML: yaml: ") {
			t.Errorf("Parse(%q) = %v, want an \"invalid YAML: yaml: ...\" error", src, err)
		}
	}
	_, err := Parse([]byte("defaultProtocol: tech\ndefaultProtocol: public\n"))
	if err == nil || err.Error() != `invalid YAML: line 2: mapping key "defaultProtocol" already defined at line 1` {
		t.Errorf("duplicate key: %v, want it named", err)
	}
}

func TestZeroFileIsValid(t *testing.T) {
	// The zero value means "no --config": it validates with or without defaults applied.
	if err := (&File{}).Validate(); err != nil {
		t.Errorf("zero File: Validate() = %v, want nil", err)
	}
	f := &File{}
	f.ApplyDefaults()
	if !reflect.DeepEqual(f, defaults()) {
		t.Errorf("ApplyDefaults on a zero File = %#v, want %#v", f, defaults())
	}
	f.ApplyDefaults() // idempotent
	if !reflect.DeepEqual(f, defaults()) {
		t.Errorf("ApplyDefaults twice = %#v", f)
	}
}

func TestLoad(t *testing.T) {
	t.Run("no file means defaults", func(t *testing.T) {
		f, err := Load("")
		if err != nil {
			t.Fatalf("Load(\"\"): %v", err)
		}
		if !reflect.DeepEqual(f, defaults()) {
			t.Errorf("Load(\"\") = %#v, want %#v", f, defaults())
		}
	})
	t.Run("missing file", func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "nope.yaml")
		f, err := Load(name)
		if err == nil {
			t.Fatalf("Load(missing) = %#v, want an error", f)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Load(missing) = %v, want it to wrap fs.ErrNotExist", err)
		}
		if !strings.HasPrefix(err.Error(), "config: ") || !strings.Contains(err.Error(), name) {
			t.Errorf("Load(missing) = %q, want the stage prefix and the file name", err)
		}
	})
	t.Run("a directory", func(t *testing.T) {
		if _, err := Load(t.TempDir()); err == nil {
			t.Error("Load(dir) = nil error")
		}
	})
	t.Run("contract example from disk", func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "promptgate.yaml")
		if err := os.WriteFile(name, []byte(contractExample), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := Load(name)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		want, err := Parse([]byte(contractExample))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(f, want) {
			t.Errorf("Load = %#v, want %#v", f, want)
		}
	})
	t.Run("empty file from disk", func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "empty.yaml")
		if err := os.WriteFile(name, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := Load(name)
		if err != nil {
			t.Fatalf("Load(empty): %v", err)
		}
		if !reflect.DeepEqual(f, defaults()) {
			t.Errorf("Load(empty) = %#v, want defaults", f)
		}
	})
	t.Run("bad file names the file and the key", func(t *testing.T) {
		name := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(name, []byte("limits:\n  maxBodyBytes: -1\n  upstreamTimeout: -1s\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := Load(name)
		if err == nil {
			t.Fatalf("Load(bad) = %#v, want an error", f)
		}
		want := "config " + name + ": limits.maxBodyBytes: must be positive, e.g. 10485760\nlimits.upstreamTimeout: must be positive, e.g. 120s"
		if err.Error() != want {
			t.Errorf("Load(bad) = %q, want %q", err, want)
		}
	})
}

func TestPluginCacheTTLZeroSwitchesTheCacheOff(t *testing.T) {
	sum := strings.Repeat("a", 64)
	f, err := Parse([]byte("plugins:\n" +
		"  - {name: a, path: ./a, sha256: " + sum + ", cacheTTL: 0ms}\n" +
		"  - {name: b, path: ./b, sha256: " + sum + "}\n" +
		"  - {name: c, path: ./c, sha256: " + sum + ", cacheTTL: 0s}\n" +
		"  - {name: d, path: ./d, sha256: " + sum + ", cacheTTL: 5s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := []time.Duration{f.Plugins[0].CacheTTL, f.Plugins[1].CacheTTL, f.Plugins[2].CacheTTL, f.Plugins[3].CacheTTL}
	if got[0] != 0 || got[1] != plugins.DefaultCacheTTL || got[2] != 0 || got[3] != 5*time.Second {
		t.Fatalf("cacheTTLs %v", got)
	}
	if _, err := Parse([]byte("plugins:\n  - {name: a, path: ./a, sha256: " + sum + ", cacheTTL: -1s}\n")); err == nil || !strings.Contains(err.Error(), "cacheTTL") {
		t.Fatalf("a negative cacheTTL: %v", err)
	}
}
