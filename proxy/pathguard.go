package proxy

import (
	"net/http"
	"net/url"
	"path"
	"strings"
)

// methodOverrides are the request headers (and query parameter) by which some servers take another method
// than the request line's.
var methodOverrides = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// disguisedRoute returns the rewritten path that a passed-through request may reach at an upstream that routes
// more loosely than the proxy does, or "" when it cannot. The path is read as such an upstream might: percent
// escapes decoded (%2F and double escapes too), ";params" cut off, dot segments and repeated or trailing
// slashes resolved, blanks and control characters at the end dropped, letters compared without regard to
// case. A POST that spells a rewritten path so, or any request to one that asks for another method (an
// override header or a _method parameter), would skip the rewriting and the vetting.
func disguisedRoute(r *http.Request) string {
	p := loosePath(r)
	override := r.URL.Query().Has("_method")
	for _, h := range methodOverrides {
		override = override || r.Header.Get(h) != ""
	}
	for _, rt := range routes {
		if strings.EqualFold(p, rt.path) && (r.Method == http.MethodPost || override) {
			return rt.path
		}
	}
	return ""
}

// loosePath is a request's path as a loose upstream router might read it (see disguisedRoute); letter case is
// kept.
func loosePath(r *http.Request) string {
	p := r.URL.EscapedPath()
	for range 3 {
		d, err := url.PathUnescape(p)
		if err != nil || d == p {
			break
		}
		p = d
	}
	if i := strings.IndexByte(p, ';'); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRightFunc(p, func(c rune) bool { return c <= ' ' || c == 0x7f })
	return path.Clean("/" + p)
}
