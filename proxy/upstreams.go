package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/promptgate/promptgate/proxy/origin"
)

// DefaultAnthropicUpstream is the Anthropic base URL used when Options.Upstreams gives none.
const DefaultAnthropicUpstream = "https://api.anthropic.com/v1"

// UpstreamLine is a line of the upstream table: an API provider that surfaces send to.
type UpstreamLine struct {
	// Name is what a surface names and the key of Options.Upstreams.
	Name string
	// Default is the base URL when Options.Upstreams gives none; "" means one must be given.
	Default string
	// Mount is the listener path its base URL stands for: with "/v1", /v1/X goes to <base>/X; with
	// "", a path goes to <base> followed by the whole path.
	Mount string
	// Paths are net/http.ServeMux patterns of the listener paths passed through to it unchanged (a
	// rewritten route of a surface that names it is more specific and wins).
	Paths []string
	// Auth is how an operator key goes to it.
	Auth Auth
}

// upstreamTable is the table of upstreams, named by the surfaces: the OpenAI-compatible one
// (--upstream), with every other /v1/ path; Anthropic's (--anthropic-upstream), with every
// /v1/messages path; Google's Gemini API (--gemini-upstream), with every /v1beta/ path. A new
// upstream is one line here (and its flags in cmd).
func upstreamTable() []UpstreamLine {
	return []UpstreamLine{
		{Name: "openai", Mount: "/v1", Paths: []string{"/v1/"}, Auth: Auth{Header: "Authorization", Prefix: "Bearer "}},
		{Name: "anthropic", Default: DefaultAnthropicUpstream, Mount: "/v1", Paths: []string{"/v1/messages", "/v1/messages/"},
			Auth: Auth{Header: "X-Api-Key", Drop: []string{"Authorization"}}},
		{Name: "gemini", Default: "https://generativelanguage.googleapis.com", Mount: "", Paths: []string{"/v1beta/"},
			Auth: Auth{Header: "X-Goog-Api-Key", Drop: []string{"Authorization"}, DropQuery: []string{"key"}}},
	}
}

// UpstreamTable returns the upstream table, for the command that wires flags to its lines.
func UpstreamTable() []UpstreamLine { return upstreamTable() }

// Auth is how an operator key is sent to an upstream, in place of the client's own credentials.
type Auth struct {
	// Header carries the key, after Prefix ("Authorization" with "Bearer ").
	Header, Prefix string
	// Drop are the client's credential headers removed when the key is sent; DropQuery its
	// credential query parameters (Gemini's key=).
	Drop, DropQuery []string
}

// apply sends secret on a request going out to u: the client's credentials it replaces are removed.
func (a Auth) apply(h http.Header, u *url.URL, secret string) {
	for _, d := range a.Drop {
		h.Del(d)
	}
	h.Set(a.Header, a.Prefix+secret)
	if len(a.DropQuery) == 0 || u.RawQuery == "" {
		return
	}
	q := u.Query()
	changed := false
	for _, k := range a.DropQuery {
		if q.Has(k) {
			q.Del(k)
			changed = true
		}
	}
	if changed {
		u.RawQuery = q.Encode()
	}
}

// carries reports whether the headers of a request sent upstream carry secret as this scheme sends
// it.
func (a Auth) carries(h http.Header, secret string) bool {
	return h.Get(a.Header) == a.Prefix+secret
}

// Upstream is where one upstream of the table is and the operator key for it.
type Upstream struct {
	// URL is the base URL; nil means the line's Default.
	URL *url.URL
	// Key, when it has a secret, is sent to requests of this upstream whose URL has the key's
	// origin, and to no other request; anywhere else the client's credentials pass unchanged.
	Key Key
}

// upstreamAt is a line of the table with where it is for one Server.
type upstreamAt struct {
	UpstreamLine
	base *url.URL
	key  Key
	// keySent is key.sendsTo(url(in)) for every in: url keeps the base's scheme and host, all
	// that an origin is made of.
	keySent bool
	// basePath is the base URL's path without its trailing slashes.
	basePath string
}

// openUpstreams resolves the table against the configured base URLs and keys: a line without a URL
// gets its default, one without a default must be given; a key must be bound (BindKey); a name not
// in the table is an error.
func openUpstreams(given map[string]Upstream) (map[string]*upstreamAt, error) {
	out := map[string]*upstreamAt{}
	for _, l := range upstreamTable() {
		u := given[l.Name]
		base := u.URL
		if base == nil {
			if l.Default == "" {
				return nil, fmt.Errorf("proxy: the %s upstream's base URL is required", l.Name)
			}
			var err error
			if base, err = url.Parse(l.Default); err != nil {
				return nil, fmt.Errorf("proxy: default %s upstream: %w", l.Name, err)
			}
		}
		if u.Key.Secret != "" && u.Key.Origin == "" {
			return nil, errors.New("proxy: an API key without an origin: bind it with BindKey")
		}
		out[l.Name] = &upstreamAt{UpstreamLine: l, base: base, key: u.Key, keySent: u.Key.sendsTo(base),
			basePath: strings.TrimRight(base.Path, "/")}
	}
	for name := range given {
		if out[name] == nil {
			return nil, fmt.Errorf("proxy: no upstream %q in the table", name)
		}
	}
	return out, nil
}

// url maps the listener URL in to this upstream: the part of its path under Mount follows the base
// URL's path, escapes kept, and the query goes as it is.
func (up *upstreamAt) url(in *url.URL) *url.URL {
	u := *up.base
	u.Path = joinMount(up.basePath, in.Path, up.Mount)
	u.RawPath = ""
	if in.RawPath != "" {
		u.RawPath = strings.TrimRight(up.base.EscapedPath(), "/") + strings.TrimPrefix(in.RawPath, up.Mount)
	}
	u.RawQuery = in.RawQuery
	return &u
}

// joinMount is base + strings.TrimPrefix(p, mount), p itself (no new string) where base is the
// mount and p is under it.
func joinMount(base, p, mount string) string {
	if base == mount && strings.HasPrefix(p, mount) {
		return p
	}
	return base + strings.TrimPrefix(p, mount)
}

// ForOrigin are the options of a pipeline that serves an intercepted origin (the HTTPS-proxy door):
// every upstream of the table is at that origin, under its mount; the keys stay bound to the
// origins they were bound to, so the origin gets a key only if it is the key's own.
func (o Options) ForOrigin(or origin.Origin) Options {
	ups := make(map[string]Upstream, len(o.Upstreams))
	for _, l := range upstreamTable() {
		ups[l.Name] = Upstream{URL: or.URL(l.Mount), Key: o.Upstreams[l.Name].Key}
	}
	o.Upstreams = ups
	return o
}
