package admin

import (
	"net/http"
	"net/url"
	"strings"
)

// contentSecurityPolicy allows the console's own files only: no inline script or style, no other origin,
// no framing.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// setSecurityHeaders sets the headers every answer of the admin listener carries.
func setSecurityHeaders(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}

// crossSite says why a request was sent by a browser for another site, "" when it was not: its
// Sec-Fetch-Site is neither same-origin nor none (another port of the same host is "same-site", and
// refused too), or its Origin is not the listener's own (its host[:port] is not the Host header). Clients
// that are not browsers send neither header and pass.
func crossSite(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "Sec-Fetch-Site: " + site
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || !strings.EqualFold(u.Host, r.Host) {
		return "Origin " + quoteShort(origin) + " is not this listener's"
	}
	return ""
}

// quoteShort quotes a header value for a message, cut to 100 bytes.
func quoteShort(v string) string {
	if len(v) > 100 {
		v = v[:100] + "…"
	}
	return `"` + strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '"' {
			return '?'
		}
		return r
	}, v) + `"`
}
