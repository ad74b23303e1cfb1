// Package config loads and validates the deployment file given with --config: routes, protocol and tool
// policy, plugins, limits and the HTTPS-proxy door. It owns parsing, defaults and validation of that YAML;
// it does not own what the values mean at run time (policy/, plugins/ and proxy/ do).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/origin"
)

// Defaults for the values a config file may leave out.
const (
	DefaultProtocol        = "neutral"
	DefaultMaxBodyBytes    = 10 << 20
	DefaultMaxJSONDepth    = 64
	DefaultUpstreamTimeout = 120 * time.Second
	DefaultPluginTimeout   = 150 * time.Millisecond
	DefaultPluginCacheTTL  = 30 * time.Second
	DefaultPluginMinMode   = "minimal"
	DefaultAuditRingSize   = 10000
	// DefaultMITMHandshakeTimeout is how long the HTTPS-proxy door waits for an intercepted client's TLS
	// handshake after its CONNECT.
	DefaultMITMHandshakeTimeout = 10 * time.Second
	// DefaultBodyReadTimeout bounds the arrival of a whole request body.
	DefaultBodyReadTimeout = 60 * time.Second
	// DefaultHeaderReadTimeout bounds the arrival of a request's headers, from its first byte (or from the
	// connection's opening).
	DefaultHeaderReadTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection that sends no new request for that long.
	DefaultIdleTimeout = 120 * time.Second
	// DefaultMaxInFlight caps the requests a listener serves at once.
	DefaultMaxInFlight = 1024
	// DefaultMaxTools caps the tools one request declares (OpenAI takes at most 128).
	DefaultMaxTools = 1024
)

// File is the whole deployment config. The zero value (no --config) is valid and means: default
// protocol neutral, no routes, every tool enabled, no plugins, default limits.
type File struct {
	// DefaultProtocol is used when no route matches and the client does not choose; "" means neutral.
	DefaultProtocol string `yaml:"defaultProtocol"`
	// Routes are matched in order; the first match wins.
	Routes []Route `yaml:"routes"`
	// Tools holds the access policy and runtime enablement of tools, across protocols, by tool name.
	Tools map[string]Tool `yaml:"tools"`
	// Plugins are the context sources started by serve.
	Plugins []Plugin `yaml:"plugins"`
	// Limits bound what one request may cost.
	Limits Limits `yaml:"limits"`
	// Listen says which requests the base-URL listener (--listen) answers besides loopback, same-origin and
	// non-browser ones.
	Listen Listen `yaml:"listen"`
	// MITM configures the HTTPS-proxy door (--proxy-listen).
	MITM *MITM `yaml:"mitm"`
	// Audit configures the decision log.
	Audit Audit `yaml:"audit"`
	// Security holds the optional prompt-injection hardening; its zero value keeps the default rendering.
	Security Security `yaml:"security"`
}

// Security holds optional prompt-injection hardening.
type Security struct {
	// DatamarkToolOutput datamarks tool output (Spotlighting): the white space of every tool result in the
	// conversation is replaced by "ˆ" (U+02C6) and the protocol rules tell the model what that means.
	// Default false.
	DatamarkToolOutput bool `yaml:"datamarkToolOutput"`
}

// Audit configures where decision events are kept.
type Audit struct {
	// Path is the bbolt file of the audit ring; "" means the DB path with ".audit" inserted before its
	// extension (promptgate.db -> promptgate.audit.db), or with an etcd store the snapshot file's
	// (snap.json -> snap.audit.db); serve decides.
	Path string `yaml:"path"`
	// RingSize is how many events the ring keeps (oldest dropped first). 0 means DefaultAuditRingSize.
	RingSize int `yaml:"ringSize"`
	// File, when set, also appends every event as one JSON line to this file.
	File string `yaml:"file"`
	// IncludeArguments puts tool-call arguments into events; by default only their sha256 is kept.
	IncludeArguments bool `yaml:"includeArguments"`
}

// Route sends matching requests to a protocol.
type Route struct {
	Match    Match  `yaml:"match"`
	Protocol string `yaml:"protocol"`
	// AllowClientProtocol lets clients on this route choose their protocol with the header or the body
	// field. Nil means false: a route pins its protocol unless it says otherwise.
	AllowClientProtocol *bool `yaml:"allowClientProtocol"`
}

// Match is the condition of a route; every non-empty field must match. An empty Match matches all.
type Match struct {
	// APIKeySha256 is the lowercase hex SHA-256 of the client's bearer token (or x-api-key).
	APIKeySha256 string `yaml:"apiKeySha256"`
	// Header maps header names to exact values or globs (path.Match syntax).
	Header map[string]string `yaml:"header"`
	// Model is an exact model name or a glob such as "gpt-4o*".
	Model string `yaml:"model"`
	// Path is an exact request path or a glob, e.g. /v1/chat/completions.
	Path string `yaml:"path"`
}

// Tool is the deployment's policy for one tool name.
type Tool struct {
	// Enabled nil or true keeps the tool; false removes it in every protocol (an operator kill switch).
	Enabled *bool `yaml:"enabled"`
	// Scope, when set, must be listed in the protocol's scope for the tool to be allowed.
	Scope string `yaml:"scope"`
	// AllowedProtocols, when non-empty, lists the protocols (or their bases) the tool may be used in.
	AllowedProtocols []string `yaml:"allowedProtocols"`
}

// Plugin is one context source.
type Plugin struct {
	Name               string         `yaml:"name"`
	Path               string         `yaml:"path"`
	SHA256             string         `yaml:"sha256"`
	Module             string         `yaml:"module"`
	MinMode            string         `yaml:"minMode"`
	Timeout            time.Duration  `yaml:"timeout"`
	Required           bool           `yaml:"required"`
	CacheTTL           time.Duration  `yaml:"cacheTTL"`
	Config             map[string]any `yaml:"config"`
	ReceiveUserMessage bool           `yaml:"receiveUserMessage"`
	TrustedDirectives  bool           `yaml:"trustedDirectives"`
}

// Limits bound one request.
type Limits struct {
	// MaxBodyBytes caps a request body; larger bodies get 413 body_too_large. 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64 `yaml:"maxBodyBytes"`
	// MaxJSONDepth caps nesting of request bodies and tool-call arguments. 0 means DefaultMaxJSONDepth.
	MaxJSONDepth int `yaml:"maxJSONDepth"`
	// UpstreamTimeout bounds the wait for the upstream's response headers, and each silent gap in a
	// streamed body. 0 means DefaultUpstreamTimeout.
	UpstreamTimeout time.Duration `yaml:"upstreamTimeout"`
	// BodyReadTimeout bounds the arrival of a whole request body, from the end of its headers (408
	// request_timeout past it); it never bounds the answer. 0 means DefaultBodyReadTimeout.
	BodyReadTimeout time.Duration `yaml:"bodyReadTimeout"`
	// HeaderReadTimeout bounds the arrival of a request's headers; the connection is closed past it. 0 means
	// DefaultHeaderReadTimeout.
	HeaderReadTimeout time.Duration `yaml:"headerReadTimeout"`
	// IdleTimeout closes a keep-alive connection that sends no new request for that long. 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration `yaml:"idleTimeout"`
	// MaxInFlight caps the requests a listener serves at once (streams included, health checks not); past it
	// a request gets 503 overloaded with Retry-After. 0 means DefaultMaxInFlight.
	MaxInFlight int `yaml:"maxInFlight"`
	// MaxTools caps the tools one request declares (each can be a decision event); past it the request gets
	// 400 invalid_request. 0 means DefaultMaxTools.
	MaxTools int `yaml:"maxTools"`
}

// Listen says which requests the base-URL listener answers (guard.Config).
type Listen struct {
	// Hosts are the Host names answered besides loopback ones (localhost, *.localhost, 127.0.0.0/8, ::1): a
	// name or an IP address, exact, or "*.example.com" for every name under example.com.
	Hosts []string `yaml:"hosts"`
	// AllowedOrigins are the browser origins (scheme://host[:port]) whose pages may call the listener
	// cross-site; they get CORS answers. Empty: no web page may.
	AllowedOrigins []string `yaml:"allowedOrigins"`
}

// MITM configures interception in the HTTPS-proxy mode.
type MITM struct {
	CACert      string   `yaml:"caCert"`
	CAKey       string   `yaml:"caKey"`
	Hosts       []string `yaml:"hosts"`
	Passthrough *bool    `yaml:"passthrough"`
	UpstreamCA  string   `yaml:"upstreamCA"`
	// AllowPrivateDestinations lists host names and IP addresses that passthrough may reach although they
	// are loopback, link-local or private (e.g. a local model server). Empty: passthrough reaches only
	// public addresses. promptgate's own listeners are never reached, listed or not.
	AllowPrivateDestinations []string `yaml:"allowPrivateDestinations"`
	// HandshakeTimeout closes an intercepted CONNECT whose client has not completed its TLS handshake in
	// time. 0 means DefaultMITMHandshakeTimeout.
	HandshakeTimeout time.Duration `yaml:"handshakeTimeout"`
}

// Load reads and validates a config file. An empty path returns the defaults.
func Load(file string) (*File, error) {
	if file == "" {
		f := &File{}
		f.ApplyDefaults()
		return f, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", file, err)
	}
	return f, nil
}

// Parse decodes YAML strictly (unknown keys are errors), applies defaults and validates.
func Parse(b []byte) (*File, error) {
	f := &File{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(f); err != nil && !errors.Is(err, io.EOF) {
		return nil, explainYAML(err, b)
	}
	f.ApplyDefaults()
	// cacheTTL: 0 (written out) switches a plugin's cache off; only a missing key means the default.
	var ttls struct {
		Plugins []struct {
			CacheTTL *time.Duration `yaml:"cacheTTL"`
		} `yaml:"plugins"`
	}
	if yaml.Unmarshal(b, &ttls) == nil && len(ttls.Plugins) == len(f.Plugins) {
		for i, p := range ttls.Plugins {
			if p.CacheTTL != nil && *p.CacheTTL == 0 {
				f.Plugins[i].CacheTTL = 0
			}
		}
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return f, nil
}

var (
	unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type config\.(\w+)$`)
	badValue     = regexp.MustCompile("(?s)^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
)

// explainYAML turns yaml.v3's messages about unknown keys and values of the wrong type into ones that
// name the key and the fix; every problem the decoder found is kept.
func explainYAML(err error, src []byte) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("invalid YAML: %w", err)
	}
	var errs []error
	var spots []yamlSpot
	used := map[*yaml.Node]bool{}
	for _, msg := range te.Errors {
		if m := unknownField.FindStringSubmatch(msg); m != nil {
			errs = append(errs, fmt.Errorf("line %s: unknown key %q in %s; valid keys: %s", m[1], m[2], sectionName(m[3]), strings.Join(knownKeys[m[3]], ", ")))
		} else if m := badValue.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			if spots == nil {
				spots = spotsOf(src)
			}
			got := yamlKinds[m[2]]
			if got == "" {
				got = "!!" + m[2]
			}
			if m[3] != "" {
				got += fmt.Sprintf(" %q", m[3])
			}
			errs = append(errs, fmt.Errorf("line %s: %s: got %s, want %s", m[1], keyAt(spots, used, line, m[2], m[3]), got, wantOf(m[4])))
		} else {
			errs = append(errs, fmt.Errorf("invalid YAML: %s", msg))
		}
	}
	return errors.Join(errs...)
}

var yamlKinds = map[string]string{"str": "a string", "int": "a number", "float": "a number", "bool": "a boolean", "seq": "a list", "map": "a mapping", "null": "null", "timestamp": "a timestamp"}

// wantOf says, for a Go type named by yaml.v3, what the file should hold instead.
func wantOf(typ string) string {
	switch {
	case typ == "time.Duration":
		return "a duration with a unit, e.g. 150ms or 30s"
	case typ == "bool" || typ == "*bool":
		return "true or false"
	case strings.HasPrefix(typ, "int") || strings.HasPrefix(typ, "uint"):
		return "a whole number"
	case typ == "string":
		return "a string (quote it)"
	case strings.HasPrefix(typ, "[]"):
		return "a list, e.g. [a, b]"
	}
	return "a mapping of key: value"
}

// yamlSpot is one value node of the document and its key path, e.g. limits.maxBodyBytes, plugins[0].timeout.
type yamlSpot struct {
	key  string
	node *yaml.Node
}

// spotsOf lists the value nodes of src in document order, parents before children.
func spotsOf(src []byte) []yamlSpot {
	var doc yaml.Node
	if yaml.Unmarshal(src, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	var out []yamlSpot
	var walk func(n *yaml.Node, key string)
	walk = func(n *yaml.Node, key string) {
		out = append(out, yamlSpot{key, n})
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				if key != "" {
					k = key + "." + k
				}
				walk(n.Content[i+1], k)
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(c, fmt.Sprintf("%s[%d]", key, i))
			}
		}
	}
	walk(doc.Content[0], "")
	return out
}

// keyAt names the key whose value yaml.v3 refused on line: a scalar equal to value (which yaml.v3 may
// cut to 7 characters and "..."), else the innermost list or mapping, skipping spots already named.
func keyAt(spots []yamlSpot, used map[*yaml.Node]bool, line int, tag, value string) string {
	value, cut := strings.CutSuffix(value, "...")
	fits := func(n *yaml.Node) bool {
		switch tag {
		case "seq":
			return n.Kind == yaml.SequenceNode
		case "map":
			return n.Kind == yaml.MappingNode
		}
		return n.Kind == yaml.ScalarNode && (n.Value == value || cut && strings.HasPrefix(n.Value, value))
	}
	pick := -1
	for i, sp := range spots {
		if sp.node.Line != line || used[sp.node] || !fits(sp.node) {
			continue
		}
		pick = i
		if tag != "seq" && tag != "map" {
			break // the first scalar that fits; containers: the innermost, i.e. the last
		}
	}
	if pick < 0 {
		return fmt.Sprintf("the value on line %d", line)
	}
	used[spots[pick].node] = true
	if spots[pick].key == "" {
		return "the top level"
	}
	return spots[pick].key
}

func sectionName(typ string) string {
	switch typ {
	case "File":
		return "the top level"
	case "Route":
		return "a route"
	case "Match":
		return "a route's match"
	case "Tool":
		return "a tool entry"
	case "Plugin":
		return "a plugin entry"
	case "Limits":
		return "limits"
	case "Listen":
		return "listen"
	case "MITM":
		return "mitm"
	case "Audit":
		return "audit"
	case "Security":
		return "security"
	}
	return typ
}

var knownKeys = map[string][]string{
	"File":     {"defaultProtocol", "routes", "tools", "plugins", "limits", "listen", "mitm", "audit", "security"},
	"Listen":   {"hosts", "allowedOrigins"},
	"Security": {"datamarkToolOutput"},
	"Audit":    {"path", "ringSize", "file", "includeArguments"},
	"Route":    {"match", "protocol", "allowClientProtocol"},
	"Match":    {"apiKeySha256", "header", "model", "path"},
	"Tool":     {"enabled", "scope", "allowedProtocols"},
	"Plugin":   {"name", "path", "sha256", "module", "minMode", "timeout", "required", "cacheTTL", "config", "receiveUserMessage", "trustedDirectives"},
	"Limits":   {"maxBodyBytes", "maxJSONDepth", "upstreamTimeout", "bodyReadTimeout", "headerReadTimeout", "idleTimeout", "maxInFlight"},
	"MITM":     {"caCert", "caKey", "hosts", "passthrough", "upstreamCA", "allowPrivateDestinations", "handshakeTimeout"},
}

// ApplyDefaults fills every zero value that has a default.
func (f *File) ApplyDefaults() {
	if f.DefaultProtocol == "" {
		f.DefaultProtocol = DefaultProtocol
	}
	if f.Limits.MaxBodyBytes == 0 {
		f.Limits.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if f.Limits.MaxJSONDepth == 0 {
		f.Limits.MaxJSONDepth = DefaultMaxJSONDepth
	}
	if f.Limits.MaxTools == 0 {
		f.Limits.MaxTools = DefaultMaxTools
	}
	if f.Limits.UpstreamTimeout == 0 {
		f.Limits.UpstreamTimeout = DefaultUpstreamTimeout
	}
	f.Limits.ApplyDefaults()
	for i := range f.Plugins {
		p := &f.Plugins[i]
		if p.Timeout == 0 {
			p.Timeout = DefaultPluginTimeout
		}
		if p.CacheTTL == 0 {
			p.CacheTTL = DefaultPluginCacheTTL
		}
		if p.MinMode == "" {
			p.MinMode = DefaultPluginMinMode
		}
	}
	if f.Audit.RingSize == 0 {
		f.Audit.RingSize = DefaultAuditRingSize
	}
	if f.MITM != nil && f.MITM.Passthrough == nil {
		t := true
		f.MITM.Passthrough = &t
	}
	if f.MITM != nil && f.MITM.HandshakeTimeout == 0 {
		f.MITM.HandshakeTimeout = DefaultMITMHandshakeTimeout
	}
}

// ApplyDefaults fills the zero listener limits (body-read, header-read and idle timeouts, in-flight cap)
// with their defaults.
func (l *Limits) ApplyDefaults() {
	if l.BodyReadTimeout == 0 {
		l.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if l.HeaderReadTimeout == 0 {
		l.HeaderReadTimeout = DefaultHeaderReadTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
}

var (
	idPattern  = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	hexPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Validate returns every problem of the file joined, each naming the key path and the fix.
func (f *File) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if f.DefaultProtocol != "" && !idPattern.MatchString(f.DefaultProtocol) { // "" means neutral
		bad("defaultProtocol", "%q is not a protocol id (letters, digits, _ . -)", f.DefaultProtocol)
	}
	for i, r := range f.Routes {
		key := fmt.Sprintf("routes[%d]", i)
		if r.Protocol == "" {
			bad(key+".protocol", "missing: name the protocol this route selects")
		} else if !idPattern.MatchString(r.Protocol) {
			bad(key+".protocol", "%q is not a protocol id", r.Protocol)
		}
		m := r.Match
		if m.APIKeySha256 != "" && !hexPattern.MatchString(m.APIKeySha256) {
			bad(key+".match.apiKeySha256", "must be 64 lowercase hex characters (sha256 of the API key, e.g. `printf %%s \"$KEY\" | sha256sum`)")
		}
		for _, g := range []struct{ k, v string }{{"model", m.Model}, {"path", m.Path}} {
			if _, err := path.Match(g.v, ""); err != nil {
				bad(key+".match."+g.k, "bad glob %q: %v", g.v, err)
			}
		}
		for h, v := range m.Header {
			if _, err := path.Match(v, ""); err != nil {
				bad(key+".match.header."+h, "bad glob %q: %v", v, err)
			}
			if h == "" || strings.ContainsAny(h, " :\t") {
				bad(key+".match.header", "%q is not a header name", h)
			}
		}
	}
	for name, t := range f.Tools {
		key := "tools." + name
		if name == "" {
			bad("tools", "empty tool name")
		}
		for j, p := range t.AllowedProtocols {
			if !idPattern.MatchString(p) {
				bad(fmt.Sprintf("%s.allowedProtocols[%d]", key, j), "%q is not a protocol id", p)
			}
		}
	}
	seen := map[string]bool{}
	for i, p := range f.Plugins {
		key := fmt.Sprintf("plugins[%d]", i)
		if p.Name != "" {
			key = fmt.Sprintf("plugins[%d] (%s)", i, p.Name)
		}
		switch {
		case p.Name == "":
			bad(key+".name", "missing: the plugin's key in the runtime context JSON")
		case !idPattern.MatchString(p.Name):
			bad(key+".name", "%q: use letters, digits, _ . -", p.Name)
		case p.Name == "meta" || p.Name == "request" || p.Name == "debugNotes":
			bad(key+".name", "%q is reserved in the runtime context JSON; choose another name", p.Name)
		case seen[p.Name]:
			bad(key+".name", "duplicate plugin name %q", p.Name)
		}
		seen[p.Name] = true
		if p.Path == "" {
			bad(key+".path", "missing: the plugin binary")
		}
		if !hexPattern.MatchString(strings.ToLower(p.SHA256)) {
			bad(key+".sha256", "required: the binary's sha256 as 64 hex characters (sha256sum %s)", p.Path)
		}
		switch p.MinMode {
		case "minimal", "standard", "full":
		default:
			bad(key+".minMode", "%q: use minimal, standard or full", p.MinMode)
		}
		if p.Timeout < 0 {
			bad(key+".timeout", "must be positive, e.g. 150ms")
		}
		if p.CacheTTL < 0 {
			bad(key+".cacheTTL", "must be zero or positive, e.g. 30s")
		}
	}
	if f.Limits.MaxBodyBytes < 0 {
		bad("limits.maxBodyBytes", "must be positive, e.g. 10485760")
	}
	if f.Limits.MaxJSONDepth < 0 || f.Limits.MaxJSONDepth > 10000 {
		bad("limits.maxJSONDepth", "must be between 1 and 10000, e.g. 64")
	}
	if f.Limits.UpstreamTimeout < 0 {
		bad("limits.upstreamTimeout", "must be positive, e.g. 120s")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
		eg  string
	}{
		{"bodyReadTimeout", f.Limits.BodyReadTimeout, "60s"},
		{"headerReadTimeout", f.Limits.HeaderReadTimeout, "10s"},
		{"idleTimeout", f.Limits.IdleTimeout, "120s"},
	} {
		if d.v < 0 {
			bad("limits."+d.key, "must be positive, e.g. %s", d.eg)
		}
	}
	if f.Limits.MaxInFlight < 0 {
		bad("limits.maxInFlight", "must be positive, e.g. 1024")
	}
	if f.Limits.MaxTools < 0 {
		bad("limits.maxTools", "must be positive, e.g. 1024")
	}
	for i, h := range f.Listen.Hosts {
		if _, err := guard.ParseHost(h); err != nil {
			bad(fmt.Sprintf("listen.hosts[%d]", i), "%v", err)
		}
	}
	for i, o := range f.Listen.AllowedOrigins {
		if _, err := guard.ParseOrigin(o); err != nil {
			bad(fmt.Sprintf("listen.allowedOrigins[%d]", i), "%v", err)
		}
	}
	if f.Audit.RingSize < 0 || f.Audit.RingSize > 10_000_000 {
		bad("audit.ringSize", "must be between 1 and 10000000, e.g. 10000")
	}
	if m := f.MITM; m != nil {
		if m.CACert == "" {
			bad("mitm.caCert", "missing: the CA certificate written by `promptgate ca init`")
		}
		if m.CAKey == "" {
			bad("mitm.caKey", "missing: the CA key written by `promptgate ca init`")
		}
		for j, h := range m.Hosts {
			if h == "" || strings.ContainsAny(h, "/: ") {
				bad(fmt.Sprintf("mitm.hosts[%d]", j), "%q: give a host name only, e.g. api.openai.com", h)
			}
		}
		for j, h := range m.AllowPrivateDestinations {
			if _, err := origin.Host(h); err != nil {
				bad(fmt.Sprintf("mitm.allowPrivateDestinations[%d]", j), "%q: give a host name or an IP address without a port, e.g. 127.0.0.1 or models.internal", h)
			}
		}
		if m.HandshakeTimeout < 0 {
			bad("mitm.handshakeTimeout", "must be positive, e.g. 10s")
		}
	}
	return errors.Join(errs...)
}
