package proxy

import (
	"context"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/promptgate/promptgate/proxy/surface"
)

// routeTable matches a request to the rewritten routes of the surfaces as the proxy listener does:
// a net/http.ServeMux of their patterns, whose handlers only note which route matched and its
// wildcards.
type routeTable struct {
	mux *http.ServeMux
}

// routeHit is a route a request matched, with the request's wildcard values.
type routeHit struct {
	sf    surface.Surface
	rt    surface.Route
	value func(name string) string
}

type hitKey struct{}

// newRouteTable is the table of the surfaces' routes. folded matches paths without regard to letter
// case or method (for the disguised-route guard): its patterns are the routes' paths, lowercased.
func newRouteTable(sfs []surface.Surface, folded bool) *routeTable {
	t := &routeTable{mux: http.NewServeMux()}
	for _, sf := range sfs {
		for _, rt := range sf.Routes() {
			pattern := rt.Pattern
			if folded {
				pattern = strings.ToLower(rt.Path())
			}
			t.mux.HandleFunc(pattern, func(_ http.ResponseWriter, r *http.Request) {
				if h, ok := r.Context().Value(hitKey{}).(*routeHit); ok {
					h.sf, h.rt, h.value = sf, rt, r.PathValue
				}
			})
		}
	}
	return t
}

// find is the route a request of method to u matches, or nil. A path the listener would redirect
// (not clean) matches none.
func (t *routeTable) find(method string, u *url.URL) *routeHit {
	h := &routeHit{}
	r := &http.Request{Method: method, URL: u, Header: http.Header{}}
	t.mux.ServeHTTP(discard{}, r.WithContext(context.WithValue(context.Background(), hitKey{}, h)))
	if h.sf == nil {
		return nil
	}
	return h
}

// discard is a ResponseWriter that keeps nothing, for find.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// routeTarget reads what a request's path and query say of it (surface.Route.Target); a route
// without a reader rewrites every request of its pattern.
func routeTarget(rt surface.Route, value func(string) string, q url.Values) (surface.Target, bool, error) {
	if rt.Target == nil {
		return surface.Target{}, true, nil
	}
	return rt.Target(value, q)
}

// match is the surface and target of a request to path (which may end in a query, as a preview's
// does), nil when it is not a rewritten route; err when its surface refuses it.
func (e *Engine) match(path string) (sf surface.Surface, t surface.Target, u *url.URL, err error) {
	u, perr := url.Parse(path)
	if perr != nil || !strings.HasPrefix(u.Path, "/") {
		return nil, t, nil, nil
	}
	h := e.routes.find(http.MethodPost, u)
	if h == nil {
		return nil, t, nil, nil
	}
	t, ok, err := routeTarget(h.rt, h.value, u.Query())
	if err != nil {
		return nil, t, nil, err
	}
	if !ok {
		return nil, t, nil, nil
	}
	return h.sf, t, u, nil
}

// spelt returns the rewritten route that the path p, read loosely (surface.LoosePath), spells
// without regard to letter case, or under another path (see spellings), or "" when it spells none:
// a route whose surface would rewrite or refuse it.
func (e *Engine) spelt(p string) string {
	for _, q := range e.spellings(strings.ToLower(p)) {
		if r := e.speltAs(q); r != "" {
			return r
		}
	}
	return ""
}

// spellings are p and, for each route whose last segment is a wildcard (Gemini's MODEL:METHOD),
// that route's path with p's last segment: an upstream serves such a method under other paths too
// (Google's generateContent under /v1/models/, /v1alpha/models/, and Vertex AI's
// /v1/projects/.../models/), and a request to one the proxy does not rewrite would skip the
// vetting.
func (e *Engine) spellings(p string) []string {
	out := []string{p}
	last := p[strings.LastIndexByte(p, '/')+1:]
	if last == "" {
		return out
	}
	for _, rp := range e.Paths() {
		dir, seg := path.Split(rp)
		if q := strings.ToLower(dir) + last; strings.HasPrefix(seg, "{") && !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}

// speltAs is the rewritten route the lower-cased path p spells, or "".
func (e *Engine) speltAs(p string) string {
	h := e.folded.find(http.MethodPost, &url.URL{Path: p})
	if h == nil {
		return ""
	}
	if _, ok, err := routeTarget(h.rt, h.value, nil); ok || err != nil {
		return h.rt.Path()
	}
	return ""
}

// Paths are the rewritten routes' paths, in the order of the surface table.
func (e *Engine) Paths() []string {
	var out []string
	for _, sf := range e.surfaces {
		for _, rt := range sf.Routes() {
			out = append(out, rt.Path())
		}
	}
	return out
}
