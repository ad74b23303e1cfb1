// Package guard decides, before anything else happens, whether a listener answers a request at all:
// a request addressed to a Host that is neither this machine nor a name the operator listed (DNS
// rebinding), and a request a browser sends on behalf of a page of another site (an Origin or
// Sec-Fetch-Site of another site, a CORS preflight, a "simple" text or form POST that needs no
// preflight), are refused. It also answers the CORS preflight of browser origins the operator opted
// in, and drops the Access-Control-* headers of an upstream.
//
// It owns these checks only. It does not own the listeners (cmd/promptgate), the error JSON (its
// callers write a Refusal in their own shape) nor what a request means (proxy/, proxy/admin/).
package guard

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strings"
)

// Config lists what an operator opts in to; its zero value answers loopback Hosts and same-origin
// or non-browser requests only.
type Config struct {
	// Hosts are the Host names answered besides loopback ones: a name or an IP address, matched
	// exactly (any port, any letter case), or "*.example.com" for every name under example.com (not
	// example.com itself).
	Hosts []string `yaml:"hosts"`
	// AllowedOrigins are browser origins ("https://app.example.com", scheme://host[:port]) whose
	// cross-site requests are answered, with CORS headers, and whose preflights are answered.
	AllowedOrigins []string `yaml:"allowedOrigins"`
	// Section is the config section that holds Hosts and AllowedOrigins ("listen"), named in
	// refusals; "" when they cannot be configured.
	Section string `yaml:"-"`
}

// Validate returns every problem of the hosts and origins, each naming its key path under key (the
// section, e.g. "listen") and the fix.
func (c *Config) Validate(key string) []error {
	var errs []error
	for i, h := range c.Hosts {
		if _, err := ParseHost(h); err != nil {
			errs = append(errs, fmt.Errorf("%s.hosts[%d]: %w", key, i, err))
		}
	}
	for i, o := range c.AllowedOrigins {
		if _, err := ParseOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("%s.allowedOrigins[%d]: %w", key, i, err))
		}
	}
	return errs
}

// Policy is a checked Config.
type Policy struct {
	hosts    map[string]bool // exact names, lower case, without a final dot
	addrs    map[netip.Addr]bool
	suffixes []string        // ".example.com" for "*.example.com"
	origins  map[string]bool // canonical origins
	// optIn and hostFix end refusals: how to allow the request, when it can be.
	optIn, hostFix string
}

// Refusal is why a request is not answered: the status, an error code and a message for the client.
type Refusal struct {
	Status  int
	Code    string
	Message string
}

// New checks c.
func New(c Config) (*Policy, error) {
	p := &Policy{hosts: map[string]bool{}, addrs: map[netip.Addr]bool{}, origins: map[string]bool{}}
	if c.Section != "" {
		p.optIn = " unless the operator lists their origin in " + c.Section + ".allowedOrigins"
		p.hostFix = ": add the name to " + c.Section + ".hosts in the config"
	}
	var errs []error
	for i, h := range c.Hosts {
		name, err := ParseHost(h)
		if err != nil {
			errs = append(errs, fmt.Errorf("hosts[%d]: %w", i, err))
			continue
		}
		if suffix, ok := strings.CutPrefix(name, "*"); ok {
			p.suffixes = append(p.suffixes, suffix)
		} else if ip, err := netip.ParseAddr(name); err == nil {
			p.addrs[ip] = true
		} else {
			p.hosts[name] = true
		}
	}
	for i, o := range c.AllowedOrigins {
		origin, err := ParseOrigin(o)
		if err != nil {
			errs = append(errs, fmt.Errorf("allowedOrigins[%d]: %w", i, err))
			continue
		}
		p.origins[origin] = true
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("guard: %w", errors.Join(errs...))
	}
	return p, nil
}

// ParseHost checks one entry of Config.Hosts and returns it in the form it is matched in.
func ParseHost(s string) (string, error) {
	h := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(s), "."))
	if ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); err == nil {
		return ip.Unmap().WithZone("").String(), nil
	}
	name := strings.TrimPrefix(h, "*.")
	if name == "" || strings.Contains(name, "*") {
		return "", fmt.Errorf("%q: give a host name or an IP address, or *.example.com for the names under example.com", s)
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || strings.Trim(label, "abcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			return "", fmt.Errorf("%q: give a host name only, without a scheme, port or path, e.g. gateway.internal", s)
		}
	}
	if name != h {
		return "*." + name, nil
	}
	return name, nil
}

// ParseOrigin checks one entry of Config.AllowedOrigins and returns it in canonical form (lower
// case, without the scheme's default port).
func ParseOrigin(s string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || strings.Contains(u.Host, "*") {
		return "", fmt.Errorf("%q: give an origin as a browser sends it, scheme://host[:port], e.g. https://app.example.com (no wildcard, no path)", s)
	}
	return canonicalOrigin(u.Scheme, u.Host), nil
}

// canonicalOrigin is scheme://host[:port] in lower case, without the scheme's default port.
func canonicalOrigin(scheme, hostport string) string {
	scheme, hostport = strings.ToLower(scheme), strings.ToLower(hostport)
	return scheme + "://" + stripDefaultPort(scheme, hostport)
}

func stripDefaultPort(scheme, hostport string) string {
	switch {
	case scheme == "http" && strings.HasSuffix(hostport, ":80"):
		return strings.TrimSuffix(hostport, ":80")
	case scheme == "https" && strings.HasSuffix(hostport, ":443"):
		return strings.TrimSuffix(hostport, ":443")
	}
	return hostport
}

// hostOf is the host of a Host header (host or host:port), lower case, without brackets or a final
// dot.
func hostOf(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
}

// LoopbackHost reports whether a Host header names this machine: localhost, a name under
// .localhost, an address of 127.0.0.0/8 or ::1.
func LoopbackHost(hostport string) bool {
	host := hostOf(hostport)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// AddressHost reports whether a Host header names an IP address rather than a name. Such a Host
// cannot come from DNS rebinding: a page that reaches an address by a name it controls sends that
// name, and a page whose own origin is the address is the listener's own.
func AddressHost(hostport string) bool {
	_, err := netip.ParseAddr(hostOf(hostport))
	return err == nil
}

// SameHost reports whether two Host values (host or host:port) name the same host, ports aside.
func SameHost(a, b string) bool {
	return a != "" && hostOf(a) == hostOf(b)
}

// HostAllowed reports whether the listener answers a request with this Host header: a loopback one
// or one the operator listed.
func (p *Policy) HostAllowed(hostport string) bool {
	if LoopbackHost(hostport) {
		return true
	}
	host := hostOf(hostport)
	if ip, err := netip.ParseAddr(host); err == nil {
		return p.addrs[ip.Unmap().WithZone("")]
	}
	if p.hosts[host] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// CheckHost refuses a request whose Host is neither loopback nor listed (421: it was not meant for
// this listener).
func (p *Policy) CheckHost(r *http.Request) *Refusal {
	if p.HostAllowed(r.Host) {
		return nil
	}
	return &Refusal{Status: http.StatusMisdirectedRequest, Code: "host_not_allowed",
		Message: fmt.Sprintf("this listener answers only requests addressed to localhost, 127.0.0.1, [::1] or a name the operator listed, not %q%s", r.Host, p.hostFix)}
}

// originAllowed reports whether origin (as the header carries it) is one the operator opted in.
func (p *Policy) originAllowed(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	return p.origins[canonicalOrigin(u.Scheme, u.Host)]
}

// sameOrigin reports whether origin names the host and port the request was sent to. The scheme is
// not compared: a TLS-terminating proxy in front of the listener changes it.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" {
		return false
	}
	return strings.EqualFold(stripDefaultPort(strings.ToLower(u.Scheme), strings.ToLower(u.Host)),
		stripDefaultPort(strings.ToLower(u.Scheme), strings.ToLower(r.Host)))
}

// CheckBrowser refuses a request a browser sends on behalf of a page of another site, unless that
// site's origin is opted in: an Origin header that is neither the listener's own origin nor an
// opted-in one, a Sec-Fetch-Site other than same-origin or none without an opted-in Origin, and a
// body in a content type a page can send without a preflight (text/plain,
// application/x-www-form-urlencoded), which no API client sends. OPTIONS is answered by Preflight,
// not here.
func (p *Policy) CheckBrowser(r *http.Request) *Refusal {
	origin := r.Header.Get("Origin")
	allowed := origin != "" && p.originAllowed(origin)
	if origin != "" && !allowed && !sameOrigin(origin, r) {
		return &Refusal{Status: http.StatusForbidden, Code: "origin_not_allowed",
			Message: fmt.Sprintf("a browser request from origin %q is not answered: web pages cannot use this listener%s", origin, p.optIn)}
	}
	switch site := strings.ToLower(strings.TrimSpace(r.Header.Get("Sec-Fetch-Site"))); site {
	case "", "same-origin", "none":
	default: // cross-site, same-site (another port of this host), or a value this check does not know
		if !allowed {
			return &Refusal{Status: http.StatusForbidden, Code: "origin_not_allowed",
				Message: fmt.Sprintf("a %s browser request is not answered: web pages cannot use this listener%s", site, p.optIn)}
		}
	}
	// The content types a page can send to another site without a preflight, multipart/form-data
	// aside: SDK file uploads use it, and a browser sends Origin with every POST.
	switch mt := strings.ToLower(mediaType(r.Header.Get("Content-Type"))); mt {
	case "text/plain", "application/x-www-form-urlencoded":
		return &Refusal{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type",
			Message: fmt.Sprintf("a body of type %s is not answered (a web page can send it to any site without asking): send Content-Type: application/json", mt)}
	}
	return nil
}

// mediaType is the type/subtype of a Content-Type value, as a browser's CORS check reads it: what
// comes before the first ";", blanks trimmed, parameters (well-formed or not) ignored.
func mediaType(ct string) string {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.TrimSpace(mt)
}

// Preflight answers an OPTIONS request, which is never forwarded: for an opted-in origin that asks
// with Access-Control-Request-Method, a CORS preflight answer (204; it returns nil and has written
// it); anything else is refused.
func (p *Policy) Preflight(w http.ResponseWriter, r *http.Request) *Refusal {
	origin := r.Header.Get("Origin")
	method := r.Header.Get("Access-Control-Request-Method")
	switch {
	case origin == "" || method == "":
		return &Refusal{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
			Message: "OPTIONS is not forwarded: it is answered only as the CORS preflight of an opted-in browser origin"}
	case !p.originAllowed(origin):
		return &Refusal{Status: http.StatusForbidden, Code: "origin_not_allowed",
			Message: fmt.Sprintf("the CORS preflight of origin %q is refused: web pages cannot use this listener%s", origin, p.optIn)}
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
	if hs := requestedHeaders(r.Header.Values("Access-Control-Request-Headers")); hs != "" {
		h.Set("Access-Control-Allow-Headers", hs)
	}
	h.Set("Access-Control-Max-Age", "600")
	h.Add("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// requestedHeaders is the list of header names a preflight asks for, each a valid token, sorted.
func requestedHeaders(values []string) string {
	var names []string
	for _, v := range values {
		for _, n := range strings.Split(v, ",") {
			n = strings.ToLower(strings.TrimSpace(n))
			if n != "" && strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-_.!#$%&'*+^`|~") == "" {
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// exposed are the response headers an opted-in page may read besides the CORS-safelisted ones.
const exposed = "X-Request-Id, X-Upstream-Request-Id, X-Promptgate-Protocol, X-Promptgate-Template, X-Promptgate-Tools-Removed, X-Promptgate-Blocked, X-Promptgate-Continued, Retry-After"

// Allow sets the CORS headers of an answer to an opted-in origin on h; for any other request it
// sets none.
func (p *Policy) Allow(h http.Header, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" || !p.originAllowed(origin) {
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", exposed)
	h.Add("Vary", "Origin")
}

// DropCORS deletes every Access-Control-* field of h (an upstream's: only the listener decides
// them).
func DropCORS(h http.Header) {
	for k := range h {
		if len(k) >= len("Access-Control-") && strings.EqualFold(strings.ReplaceAll(k[:len("Access-Control-")], "_", "-"), "Access-Control-") {
			delete(h, k)
		}
	}
}
