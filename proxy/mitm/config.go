package mitm

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"time"

	"github.com/promptgate/promptgate/proxy/origin"
)

// DefaultHandshakeTimeout is how long the door waits for an intercepted client's TLS handshake
// after its CONNECT.
const DefaultHandshakeTimeout = 10 * time.Second

// The header-read and idle timeouts inside an intercepted tunnel when Options leaves them zero;
// serve hands the door the listeners' own (limits.headerReadTimeout, limits.idleTimeout).
const (
	defaultHeaderReadTimeout = 10 * time.Second
	defaultIdleTimeout       = 120 * time.Second
)

// Config is the config file's mitm section: the HTTPS-proxy door (--proxy-listen).
type Config struct {
	// CACert and CAKey are the CA written by `promptgate ca init`, which signs the intercepted
	// hosts' certificates.
	CACert string `yaml:"caCert"`
	CAKey  string `yaml:"caKey"`
	// Hosts are the host names intercepted, on any port.
	Hosts []string `yaml:"hosts"`
	// Passthrough tunnels every other CONNECT untouched; false answers them 403. nil means true.
	Passthrough *bool `yaml:"passthrough"`
	// UpstreamCA is a PEM file of roots trusted for intercepted origins besides the system's.
	UpstreamCA string `yaml:"upstreamCA"`
	// AllowPrivateDestinations lists host names and IP addresses that passthrough may reach
	// although they are loopback, link-local or private (e.g. a local model server). Empty:
	// passthrough reaches only public addresses. promptgate's own listeners are never reached,
	// listed or not.
	AllowPrivateDestinations []string `yaml:"allowPrivateDestinations"`
	// HandshakeTimeout closes an intercepted CONNECT whose client has not completed its TLS
	// handshake in time. 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration `yaml:"handshakeTimeout"`
	// MaxTunnels bounds the passthrough tunnels open at once; a CONNECT past it gets 503. 0 means
	// DefaultMaxTunnels.
	MaxTunnels int `yaml:"maxTunnels"`
	// TunnelIdleTimeout closes a passthrough tunnel that carried no byte either way for this long.
	// 0 means DefaultTunnelIdleTimeout.
	TunnelIdleTimeout time.Duration `yaml:"tunnelIdleTimeout"`
}

// ApplyDefaults fills passthrough, the handshake timeout and the tunnels' limits.
func (c *Config) ApplyDefaults() {
	if c.Passthrough == nil {
		t := true
		c.Passthrough = &t
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.MaxTunnels == 0 {
		c.MaxTunnels = DefaultMaxTunnels
	}
	if c.TunnelIdleTimeout == 0 {
		c.TunnelIdleTimeout = DefaultTunnelIdleTimeout
	}
}

// Validate returns every problem of the section, each naming its key path under key (e.g. "mitm")
// and the fix.
func (c *Config) Validate(key string) []error {
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", key, k, fmt.Sprintf(format, args...)))
	}
	if c.CACert == "" {
		bad("caCert", "missing: the CA certificate written by `promptgate ca init`")
	}
	if c.CAKey == "" {
		bad("caKey", "missing: the CA key written by `promptgate ca init`")
	}
	for j, h := range c.Hosts {
		if h == "" || strings.ContainsAny(h, "/: ") {
			bad(fmt.Sprintf("hosts[%d]", j), "%q: give a host name only, e.g. api.openai.com", h)
		}
	}
	for j, h := range c.AllowPrivateDestinations {
		if _, err := origin.Host(h); err != nil {
			bad(fmt.Sprintf("allowPrivateDestinations[%d]", j), "%q: give a host name or an IP address without a port, e.g. 127.0.0.1 or models.internal", h)
		}
	}
	if c.HandshakeTimeout < 0 {
		bad("handshakeTimeout", "must be positive, e.g. 10s")
	}
	if c.MaxTunnels < 0 {
		bad("maxTunnels", "must be positive, e.g. 1024")
	}
	if c.TunnelIdleTimeout < 0 {
		bad("tunnelIdleTimeout", "must be positive, e.g. 15m")
	}
	return errs
}

// Load reads the files the section names: the CA, and the extra roots trusted for intercepted
// origins (the system's roots alone when UpstreamCA is empty).
func (c *Config) Load() (tls.Certificate, *x509.CertPool, error) {
	ca, err := LoadCA(c.CACert, c.CAKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	roots, err := Roots(c.UpstreamCA)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return ca, roots, nil
}
