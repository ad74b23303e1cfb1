package mcp

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Defaults of the config's mcp section.
const (
	// DefaultOnDefinitionChange holds a changed tool definition back until an operator approves it.
	DefaultOnDefinitionChange = ChangeBlock
	// DefaultJoinWindow is how long a released model call can be matched by an MCP call.
	DefaultJoinWindow = 10 * time.Minute
)

// What a changed tool definition does (mcp.onDefinitionChange).
const (
	// ChangeBlock holds the tool back from tools/list and refuses its calls until the change is
	// approved.
	ChangeBlock = "block"
	// ChangeReport records the change and lets it through.
	ChangeReport = "report"
)

// What a method the door does not know does (mcp.unknownMethods).
const (
	MethodsRefuse = "refuse"
	MethodsPass   = "pass"
)

// Config is the config file's mcp section: the MCP servers the door (--mcp-listen) serves, and how
// it governs them. The zero value serves none.
type Config struct {
	// Servers are the Streamable HTTP MCP servers, each at /mcp/NAME on the listener.
	Servers []Server `yaml:"servers"`
	// RequireModelCall refuses a tools/call that no model call released through promptgate (same
	// tool, same arguments, same conversation, within JoinWindow); a protocol's own
	// mcp.requireModelCall takes its place for that protocol's traffic.
	RequireModelCall bool `yaml:"requireModelCall"`
	// OnDefinitionChange is block (default) or report.
	OnDefinitionChange string `yaml:"onDefinitionChange"`
	// JoinWindow is how long a released model call can be matched; 0 means DefaultJoinWindow.
	JoinWindow time.Duration `yaml:"joinWindow"`
	// UnknownMethods is refuse (default: a JSON-RPC error "method not found") or pass.
	UnknownMethods string `yaml:"unknownMethods"`
}

// Server is one MCP server behind the door.
type Server struct {
	// Name is the server's label: its path /mcp/NAME, its outputs' source mcp:NAME.
	Name string `yaml:"name"`
	// URL is the server's Streamable HTTP endpoint (http or https, no user info, no fragment).
	URL string `yaml:"url"`
	// Headers are sent with every request to the server (its credentials), and only to it; they
	// replace the client's headers of the same name.
	Headers map[string]string `yaml:"headers"`
	// Protocol, when set, is the promptgate protocol the server's traffic runs under, as a route
	// would choose it; otherwise the protocol is chosen as for the model's requests (routes, key,
	// header).
	Protocol string `yaml:"protocol"`
	// ToolPrefix is put before the server's tool names to give the model's names of them (the names
	// the protocol's allowlist, rules and the join use); "" means the names are the same.
	ToolPrefix string `yaml:"toolPrefix"`

	url *url.URL
}

// ApplyDefaults fills the defaults.
func (c *Config) ApplyDefaults() {
	if c.OnDefinitionChange == "" {
		c.OnDefinitionChange = DefaultOnDefinitionChange
	}
	if c.JoinWindow == 0 {
		c.JoinWindow = DefaultJoinWindow
	}
	if c.UnknownMethods == "" {
		c.UnknownMethods = MethodsRefuse
	}
}

var (
	labelPattern    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	protocolPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
)

// Validate returns every problem of the section, each naming its key path under key and the fix.
func (c *Config) Validate(key string) []error {
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", key, k, fmt.Sprintf(format, args...)))
	}
	switch c.OnDefinitionChange {
	case "", ChangeBlock, ChangeReport:
	default:
		bad("onDefinitionChange", "%q: use block or report", c.OnDefinitionChange)
	}
	switch c.UnknownMethods {
	case "", MethodsRefuse, MethodsPass:
	default:
		bad("unknownMethods", "%q: use refuse or pass", c.UnknownMethods)
	}
	if c.JoinWindow < 0 {
		bad("joinWindow", "must be positive, e.g. 10m")
	}
	var names []string
	for i := range c.Servers {
		s := &c.Servers[i]
		at := fmt.Sprintf("servers[%d]", i)
		if !labelPattern.MatchString(s.Name) {
			bad(at+".name", "%q: give a label of 1-64 letters, digits, _ . - (the path /mcp/NAME and the source mcp:NAME)", s.Name)
		} else if slices.Contains(names, s.Name) {
			bad(at+".name", "%q is the name of another server: give each its own", s.Name)
		}
		names = append(names, s.Name)
		if err := s.parseURL(); err != nil {
			bad(at+".url", "%v", err)
		}
		if s.Protocol != "" && !protocolPattern.MatchString(s.Protocol) {
			bad(at+".protocol", "%q is not a protocol id", s.Protocol)
		}
		for h := range s.Headers {
			if h == "" || strings.ContainsAny(h, " :\t\r\n") || http.CanonicalHeaderKey(h) == "Host" {
				bad(at+".headers", "%q is not a header that can be sent", h)
			}
		}
	}
	return errs
}

// parseURL checks and keeps the server's URL.
func (s *Server) parseURL() error {
	u, err := url.Parse(s.URL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("%q: give the server's endpoint, such as https://mcp.example.com/mcp", s.URL)
	case u.User != nil:
		return fmt.Errorf("a URL carries no user info: give the server's credentials in headers")
	case u.Fragment != "":
		return fmt.Errorf("a URL has no fragment")
	}
	s.url = u
	return nil
}

// Endpoint is the server's parsed URL (after Validate).
func (s *Server) Endpoint() *url.URL { return s.url }
