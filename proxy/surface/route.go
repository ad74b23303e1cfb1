package surface

import (
	"net/url"
	"strings"
)

// Route is one rewritten route of a surface.
type Route struct {
	// Pattern is a net/http.ServeMux pattern with its method: "POST /v1/chat/completions". A
	// wildcard is a whole path segment ("POST /v1beta/models/{model_method}"), read as ServeMux
	// reads it (unescaped).
	Pattern string
	// Target, when not nil, reads what the request's path and query say of it: value gives a
	// wildcard's value by name. ok is false for a request of Pattern that the surface does not
	// rewrite (Gemini's models/{model}:countTokens), which goes to the surface's upstream
	// unchanged; err refuses one it cannot read. A method spelt in another letter case is read as
	// the method (a stricter upstream answers 404; a looser one must not be reached unvetted). nil:
	// every request of Pattern is rewritten, its Target zero.
	Target func(value func(name string) string, query url.Values) (t Target, ok bool, err error)
}

// Target is what a request's route says of it beside its body, on an API that puts it in the path
// (Gemini: the model, and whether the answer streams).
type Target struct {
	Model  string
	Stream bool
}

// Path is the route's path: its pattern without the method.
func (r Route) Path() string {
	if _, p, ok := strings.Cut(r.Pattern, " "); ok {
		return p
	}
	return r.Pattern
}

// Method is the route's method, "" when its pattern has none.
func (r Route) Method() string {
	if m, _, ok := strings.Cut(r.Pattern, " "); ok {
		return m
	}
	return ""
}
