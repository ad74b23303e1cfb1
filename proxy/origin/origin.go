// Package origin is the normal form of a web origin (scheme, host, port), the unit that promptgate
// binds API keys and door pipelines to. It owns that normal form only; it does not decide what may
// be sent where (proxy/ binds keys, proxy/mitm keys its pipelines).
package origin

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Origin is "scheme://host:port" in normal form: lowercase scheme and host, no trailing dot on the
// host, an IP host in its canonical spelling (IPv6 in brackets), and the port always written in
// decimal (80 for http, 443 for https when the URL leaves it out). Two spellings of one origin give
// the same Origin; the zero value is no origin and is never equal to one.
type Origin string

// Of returns the origin of u.
func Of(u *url.URL) (Origin, error) {
	if u == nil {
		return "", errors.New("origin: no URL")
	}
	return New(u.Scheme, u.Host)
}

// New returns the origin of scheme (http or https) and hostport ("host", "host:port" or
// "[v6]:port").
func New(scheme, hostport string) (Origin, error) {
	scheme = strings.ToLower(scheme)
	var defPort string
	switch scheme {
	case "http":
		defPort = "80"
	case "https":
		defPort = "443"
	default:
		return "", fmt.Errorf("origin: scheme %q: want http or https", scheme)
	}
	host, port := hostport, ""
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	}
	host, err := Host(host)
	if err != nil {
		return "", err
	}
	if port == "" {
		port = defPort
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", fmt.Errorf("origin: port %q: want a number from 1 to 65535", port)
	}
	return Origin(scheme + "://" + net.JoinHostPort(host, strconv.FormatUint(n, 10))), nil
}

// Host returns the normal form of a host name or IP address (without brackets or port): lowercase,
// one trailing dot removed, an IP in its canonical spelling. It refuses an empty name, a zone, and
// characters that no host name has.
func Host(h string) (string, error) {
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return "", fmt.Errorf("origin: host %q: a zone is not allowed", h)
		}
		return ip.String(), nil
	}
	n := strings.ToLower(strings.TrimSuffix(h, "."))
	if n == "" || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") || strings.Contains(n, "..") ||
		strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
		return "", fmt.Errorf("origin: host %q is not a host name or IP address", h)
	}
	return n, nil
}

// Scheme is the origin's scheme, "http" or "https".
func (o Origin) Scheme() string {
	s, _, _ := strings.Cut(string(o), "://")
	return s
}

// HostPort is the origin's "host:port" ("[v6]:port" for IPv6), as a URL's Host or a dialler takes
// it.
func (o Origin) HostPort() string {
	_, hp, _ := strings.Cut(string(o), "://")
	return hp
}

// URL is the origin with path p (e.g. "/v1") as a URL.
func (o Origin) URL(p string) *url.URL {
	return &url.URL{Scheme: o.Scheme(), Host: o.HostPort(), Path: p}
}
