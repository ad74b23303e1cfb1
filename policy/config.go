package policy

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// DefaultProtocol is the protocol of a request that no route and no client choice selects, where
// the config names none.
const DefaultProtocol = "neutral"

// Config is the policy part of the deployment config: which protocol a request runs under, and the
// tool access policy across protocols. The zero value means: default protocol neutral, no routes,
// every tool enabled.
type Config struct {
	// DefaultProtocol is used when no route matches and the client does not choose; "" means
	// DefaultProtocol.
	DefaultProtocol string `yaml:"defaultProtocol"`
	// Routes are matched in order; the first match wins.
	Routes []Route `yaml:"routes"`
	// Tools holds the access policy and runtime enablement of tools, across protocols, by tool
	// name.
	Tools map[string]ToolConfig `yaml:"tools"`
}

// Route sends matching requests to a protocol.
type Route struct {
	Match    Match  `yaml:"match"`
	Protocol string `yaml:"protocol"`
	// AllowClientProtocol lets clients on this route choose their protocol with the header or the
	// body field. Nil means false: a route pins its protocol unless it says otherwise.
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

// ToolConfig is the deployment's policy for one tool name.
type ToolConfig struct {
	// Enabled nil or true keeps the tool; false removes it in every protocol (an operator kill
	// switch).
	Enabled *bool `yaml:"enabled"`
	// Scope, when set, must be listed in the protocol's scope for the tool to be allowed.
	Scope string `yaml:"scope"`
	// AllowedProtocols, when non-empty, lists the protocols (or their bases) the tool may be used
	// in.
	AllowedProtocols []string `yaml:"allowedProtocols"`
}

// ApplyDefaults fills the default protocol.
func (c *Config) ApplyDefaults() {
	if c.DefaultProtocol == "" {
		c.DefaultProtocol = DefaultProtocol
	}
}

// hexPattern is a lowercase hex SHA-256.
var hexPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate returns every problem of the section, each naming its key path (from the top of the
// file) and the fix.
func (c *Config) Validate() []error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if c.DefaultProtocol != "" && !idPattern.MatchString(c.DefaultProtocol) { // "" means neutral
		bad("defaultProtocol", "%q is not a protocol id (letters, digits, _ . -)", c.DefaultProtocol)
	}
	for i, r := range c.Routes {
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
	for name, t := range c.Tools {
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
	return errs
}
