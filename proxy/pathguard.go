package proxy

import (
	"net/http"

	"github.com/promptgate/promptgate/proxy/surface"
)

// methodOverrides are the request headers (and query parameter) by which some servers take another
// method than the request line's.
var methodOverrides = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// disguisedRoute returns the rewritten path that a passed-through request may reach at an upstream
// that routes more loosely than the proxy does, or "" when it cannot. The path is read as such an
// upstream might: percent escapes decoded (%2F and double escapes too), ";params" cut off, dot
// segments and repeated or trailing slashes resolved, blanks and control characters at the end
// dropped, letters compared without regard to case (Engine.spelt: a route pattern's wildcards match
// as the listener's do, and its surface says whether it would rewrite the request). A POST that
// spells a rewritten route so, or any request to one that asks for another method (an override
// header or a _method parameter), would skip the rewriting and the vetting.
func (s *Server) disguisedRoute(r *http.Request) string {
	override := r.URL.Query().Has("_method")
	for _, h := range methodOverrides {
		override = override || r.Header.Get(h) != ""
	}
	if r.Method != http.MethodPost && !override {
		return ""
	}
	return s.opt.Engine.spelt(surface.LoosePath(r))
}
