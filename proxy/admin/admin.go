// Package admin is promptgate's admin API, served on the admin listener: the exact-request preview,
// versioned templates and protocols (list, show, new version, activate, rollback, diff, shadow),
// rollouts, the tool kill switch, the audit log, policy tests (run a case file, record one from the
// audit ring), learn mode's data and proposals, and the Prometheus metrics.
//
// It also serves the web console (package console) under /console/, and the read-mostly endpoints
// its pages need: the audit summary, the tool inventory and the health report.
//
// Every /admin/ request needs `Authorization: Bearer <token>` when a token is configured; the token
// is compared in constant time, and a token in the query string is refused (400 token_in_query)
// even when it is right, because query strings end up in logs. No CORS header is ever sent, OPTIONS
// is 405, and a browser request from another origin (Origin, or Sec-Fetch-Site other than
// same-origin or none) is 403 origin_not_allowed on every path, so a web page cannot drive the API
// from a browser; POST and PUT must send Content-Type: application/json (a policy test's case file
// may be application/yaml), and without a token only requests addressed to a loopback host are
// answered (no DNS rebinding); with a token, a Host that is an IP address or a listed name is
// answered too. The Host rule holds on every path. Every answer carries a strict
// Content-Security-Policy and forbids framing. Every error is OpenAI-shaped JSON. GET /metrics and
// the console's static pages need no token: they hold no secrets, but they keep the Host and
// cross-site rules.
//
// Every change is recorded as an audit event (Options.Recorder), with the actor from the
// X-Promptgate-Actor header ("admin" when absent).
//
// It owns the HTTP surface only. It does not store definitions (store/), decide what a definition
// means (policy/, assembly/, through the store's validation hook), build previews (proxy.Engine),
// keep the audit log (policy/audit), run policy tests (proxy/policytest) or choose the listener
// address (cmd/promptgate).
package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/policy/learn"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/console"
	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/policytest"
	"github.com/promptgate/promptgate/proxy/toolseen"
	"github.com/promptgate/promptgate/store"
)

// Limits and names of the admin API.
const (
	// MaxBodyBytes caps every request body; larger bodies get 413 body_too_large.
	MaxBodyBytes = 10 << 20
	// HeaderActor names who makes a change; it is recorded as the version's author and the event's
	// actor.
	HeaderActor = "X-Promptgate-Actor"
	// DefaultActor is the actor when HeaderActor is absent.
	DefaultActor = "admin"
	// PathMetrics is served without a token.
	PathMetrics = "/metrics"
	// PathConsole is the web console's folder: its pages and static files need no token (every data
	// call they make goes to /admin/ with one), but keep the Host and cross-site rules.
	PathConsole = console.Prefix

	maxActorLen = 128
	maxNoteLen  = 1000
	// maxBodyDepth bounds the nesting of admin request bodies; the preview's own request is held to
	// the proxy's limit by the engine.
	maxBodyDepth = 512
	// auditFlushWait bounds how long GET /admin/audit waits for buffered events to be written.
	auditFlushWait = 2 * time.Second
)

// queryTokenParams are query parameters that look like credentials; they are refused on every path.
var queryTokenParams = []string{"token", "access_token", "api_key", "key", "apikey", "api-key"}

// Options configure the admin handler.
type Options struct {
	// Token is PROMPTGATE_ADMIN_TOKEN. "" means no authentication; serve allows that only on a
	// loopback address, and the handler then answers only requests whose Host is a loopback name or
	// address.
	Token string
	// Hosts are the names answered besides loopback ones and IP addresses when a token is set, on
	// every path (the config's listen.hosts, in guard.Config.Hosts' form); a name not listed may be
	// a DNS-rebinding page's.
	Hosts []string
	// Store holds the definitions. Required.
	Store store.Store
	// Preview is Engine.Preview: the same code path the proxy runs. Required.
	Preview func(ctx context.Context, in proxy.Input) ([]byte, error)
	// Audit is queried by GET /admin/audit; nil answers an empty list.
	Audit *audit.Ring
	// Recorder receives one event for every change made through the API; nil records nothing.
	Recorder audit.Recorder
	// Metrics is served at GET /metrics without a token; nil answers 404.
	Metrics http.Handler
	// Log receives one line per change and per failure (never a body or a token); nil discards.
	Log *slog.Logger

	// Tools is the proxy listener's memory of the tools requests declared (GET
	// /admin/tools/inventory); nil lists none as seen.
	Tools *toolseen.Memory
	// ToolPolicy is the config's tools section: each tool's access policy and configured
	// enablement.
	ToolPolicy map[string]policy.ToolConfig
	// Plugins reports the context sources for GET /admin/health; nil means none are configured.
	Plugins func() []plugins.SourceStatus
	// Stale says why the definitions served are not the store's latest ("" while they are); nil:
	// never.
	Stale func() string
	// Gatherer is the metrics registry GET /admin/health reads (requests, overhead, plugin latency
	// and errors, the definitions served); nil leaves those parts out.
	Gatherer prometheus.Gatherer
	// Learn is what learn mode learned (GET /admin/learn/{protocol}, GET
	// /admin/protocols/{name}/suggest); nil answers those 404 learn_off.
	Learn *learn.Store
	// MCP, when not nil, serves /admin/mcp/ (the MCP door's pinned definitions), behind the same
	// token and Host rules.
	MCP http.Handler
	// Tests is the deployment's part of a policy test run by POST /admin/tests (serve's tool
	// policy, prompt settings and limits); nil answers that endpoint 404.
	Tests *policytest.Config
}

// server is the admin handler.
type server struct {
	o        Options
	log      *slog.Logger
	tokenSum [sha256.Size]byte
	mux      *http.ServeMux
	// browser refuses cross-site browser requests (no origin is opted in) and knows the names of
	// Hosts.
	browser *guard.Policy
	console http.Handler
}

var _ http.Handler = (*server)(nil)

// New builds the admin handler.
func New(o Options) (http.Handler, error) {
	if o.Store == nil {
		return nil, errors.New("admin: Options.Store is required")
	}
	if o.Preview == nil {
		return nil, errors.New("admin: Options.Preview is required (use Engine.Preview)")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	browser, err := guard.New(guard.Config{Hosts: o.Hosts, Section: "listen"})
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	c, err := console.New()
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	s := &server{o: o, log: o.Log, mux: http.NewServeMux(), browser: browser, console: c}
	if o.Token != "" {
		s.tokenSum = sha256.Sum256([]byte(o.Token))
	}
	s.routes()
	return s, nil
}

func (s *server) routes() {
	s.handle("POST /admin/prompts/preview", s.preview)
	for _, k := range store.Kinds() {
		base := "/admin/" + string(k)
		s.handle("GET "+base, s.list(k))
		s.handle("GET "+base+"/{name}", s.show(k))
		s.handle("GET "+base+"/{name}/versions/{version}", s.version(k))
		s.handle("POST "+base+"/{name}/versions", s.addVersion(k))
		s.handle("POST "+base+"/{name}/activate", s.activate(k))
		s.handle("POST "+base+"/{name}/rollback", s.rollback(k))
		s.handle("GET "+base+"/{name}/diff", s.diff(k))
	}
	s.handle("POST /admin/protocols/{name}/shadow", s.setShadow)
	s.handle("DELETE /admin/protocols/{name}/shadow", s.clearShadow)
	s.handle("GET /admin/protocols/{name}/suggest", s.suggest)
	s.handle("GET /admin/shadow", s.shadowSummary)
	s.handle("GET /admin/learn/{protocol}", s.learnedOf)
	s.handle("GET /admin/tools", s.listTools)
	s.handle("GET /admin/tools/inventory", s.toolInventory)
	s.handle("GET /admin/health", s.health)
	s.handle("GET /admin/audit/summary", s.auditSummary)
	s.handle("PUT /admin/tools/{name}/enabled", s.setTool)
	s.handle("DELETE /admin/tools/{name}/enabled", s.clearTool)
	s.handle("GET /admin/audit", s.audit)
	s.handle("GET /admin/rollouts", s.listRollouts)
	s.handle("POST /admin/rollouts", s.applyRollout)
	s.handle("POST /admin/rollouts/revert", s.revertRollout)
	s.handle("POST "+pathTests, s.runTests)
	s.handle("POST "+pathTestsRecord, s.recordTest)
	if s.o.MCP != nil {
		s.mux.Handle("/admin/mcp/", s.o.MCP)
	}
	s.mux.Handle("GET "+PathConsole, s.console)
	s.mux.HandleFunc("GET "+PathMetrics, func(w http.ResponseWriter, r *http.Request) {
		if s.o.Metrics == nil {
			proxy.WriteError(w, http.StatusNotFound, "not_found", "metrics are not enabled on this listener", "")
			return
		}
		s.o.Metrics.ServeHTTP(w, r)
	})
}

// handlerFunc is a route: it answers, or returns an error that becomes the OpenAI error JSON.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *server) handle(pattern string, h handlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	})
}

type requestIDKey struct{}

// ServeHTTP checks the request's credentials and shape, then routes it.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	setSecurityHeaders(h)
	id := proxy.RequestID(r, "adm-")
	h.Set(proxy.HeaderRequestID, id)
	r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))

	if name, ok := tokenInQuery(r.URL.RawQuery); ok {
		s.log.Warn("admin: refused a credential in the query string", "request_id", id, "param", name, "path", r.URL.Path)
		proxy.WriteError(w, http.StatusBadRequest, "token_in_query",
			fmt.Sprintf("credentials are not accepted in the query string (parameter %q): send the header Authorization: Bearer <token>, and rotate the token if it was real, since URLs end up in logs", name), name)
		return
	}
	if r.Method == http.MethodOptions {
		proxy.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "OPTIONS is not served: the admin API does not take cross-origin requests", "")
		return
	}
	if ref := s.browser.CheckBrowser(r); ref != nil {
		s.log.Warn("admin: refused a cross-site browser request", "request_id", id, "path", r.URL.Path, "code", ref.Code)
		proxy.WriteError(w, ref.Status, ref.Code, ref.Message+" (open the console by its own address, "+PathConsole+" on this listener)", "")
		return
	}
	// The Host rule holds on every path, the metrics and the console's pages included; with a
	// token, every path but those two needs it.
	if msg := s.hostRefusal(r.Host); msg != "" {
		s.log.Warn("admin: refused a request addressed to another host", "request_id", id, "path", r.URL.Path)
		proxy.WriteError(w, http.StatusForbidden, "host_not_allowed", msg, "")
		return
	}
	if s.o.Token != "" && r.URL.Path != PathMetrics && !strings.HasPrefix(r.URL.Path, PathConsole) && !s.authorized(r) {
		h.Set("WWW-Authenticate", "Bearer")
		proxy.WriteError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong admin token: send Authorization: Bearer <PROMPTGATE_ADMIN_TOKEN>", "")
		return
	}
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		types := bodyTypes(r.URL.Path)
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); !slices.Contains(types, mt) {
			proxy.WriteError(w, http.StatusUnsupportedMediaType, "unsupported_media_type", "send Content-Type: "+strings.Join(types, " or ")+" (also with an empty body)", "Content-Type")
			return
		}
	}
	// The mux answers unknown paths and methods in plain text; answer those in JSON.
	if _, pattern := s.mux.Handler(r); pattern == "" {
		probe := &statusProbe{header: http.Header{}}
		s.mux.ServeHTTP(probe, r)
		if probe.status == http.StatusMethodNotAllowed {
			if allow := probe.header.Get("Allow"); allow != "" {
				h.Set("Allow", allow)
			}
			proxy.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path), "")
			return
		}
		proxy.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route for %s %s on the admin listener", r.Method, r.URL.Path), "")
		return
	}
	s.mux.ServeHTTP(w, r)
}

// hostRefusal says why a request addressed to host is not answered, "" when it is: a loopback Host
// always; with a token, also an IP address (a rebinding page sends its own name, never an address)
// or a name in Options.Hosts. Any other name may be a DNS-rebinding page's, which must read
// nothing, not even /metrics.
func (s *server) hostRefusal(host string) string {
	switch {
	case guard.LoopbackHost(host):
		return ""
	case s.o.Token == "":
		return fmt.Sprintf("without an admin token only requests addressed to localhost, 127.0.0.1 or [::1] are answered, not %q: set PROMPTGATE_ADMIN_TOKEN to use another name", host)
	case guard.AddressHost(host) || s.browser.HostAllowed(host):
		return ""
	}
	return fmt.Sprintf("only requests addressed to localhost, an IP address or a name in listen.hosts are answered, not %q: add the name to listen.hosts in the config", host)
}

// statusProbe records what the mux would answer for a request it has no route for.
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header { return p.header }
func (p *statusProbe) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}
func (p *statusProbe) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}

// authorized reports whether the request carries the admin token.
func (s *server) authorized(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return tokenEqual(s.tokenSum, strings.TrimSpace(tok))
}

// tokenEqual compares a presented token with the SHA-256 of the configured one in constant time.
// Both sides are fixed-length digests, so neither the content nor the length of the token leaks
// through timing.
func tokenEqual(wantSum [sha256.Size]byte, got string) bool {
	gotSum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(wantSum[:], gotSum[:]) == 1
}

// tokenInQuery reports the first query parameter that looks like a credential (any case).
func tokenInQuery(raw string) (string, bool) {
	if raw == "" {
		return "", false
	}
	for _, pair := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		k, _, _ := strings.Cut(pair, "=")
		if u, err := url.QueryUnescape(k); err == nil {
			k = u
		}
		k = strings.ToLower(strings.TrimSpace(k))
		for _, p := range queryTokenParams {
			if k == p {
				return k, true
			}
		}
	}
	return "", false
}

// --- errors ---

// apiError is an error the client sees as it is.
type apiError struct {
	status           int
	code, msg, param string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(code, param, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, code: code, param: param, msg: fmt.Sprintf(format, args...)}
}

// fail answers err: an *apiError as it is, a store error by its sentinel, anything else as 500.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	log := s.log.With("request_id", r.Context().Value(requestIDKey{}), "method", r.Method, "path", r.URL.Path)
	var ae *apiError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
	case errors.As(err, &mbe):
		ae = &apiError{status: http.StatusRequestEntityTooLarge, code: "body_too_large", msg: fmt.Sprintf("request body is larger than %d bytes", mbe.Limit)}
	case errors.Is(err, store.ErrInvalid):
		ae = &apiError{status: http.StatusBadRequest, code: "invalid_definition", msg: storeMessage(err)}
	case errors.Is(err, store.ErrNotFound):
		ae = &apiError{status: http.StatusNotFound, code: "not_found", msg: storeMessage(err)}
	case errors.Is(err, store.ErrNoPreviousVersion):
		ae = &apiError{status: http.StatusConflict, code: "no_previous_version", msg: storeMessage(err)}
	case errors.Is(err, store.ErrAlreadyApplied):
		ae = &apiError{status: http.StatusConflict, code: "already_applied", msg: storeMessage(err)}
	case errors.Is(err, store.ErrNothingToRevert):
		ae = &apiError{status: http.StatusConflict, code: "nothing_to_revert", msg: storeMessage(err)}
	case r.Context().Err() != nil:
		log.Info("admin: client went away", "err", err)
		return
	default:
		log.Error("admin: request failed", "err", err)
		proxy.WriteError(w, http.StatusInternalServerError, "internal_error", "internal error; see the server log", "")
		return
	}
	log.Info("admin: request refused", "status", ae.status, "code", ae.code, "err", ae.msg)
	proxy.WriteError(w, ae.status, ae.code, ae.msg, ae.param)
}

// storeMessage is a store error without the package prefix.
func storeMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "store: ")
}

// --- request helpers ---

// readBody reads the whole body under MaxBodyBytes. Its buffer grows as bytes arrive, never by the
// announced length: a request that announces 10 MiB and sends one byte costs a small buffer.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.ContentLength > MaxBodyBytes {
		return nil, &http.MaxBytesError{Limit: MaxBodyBytes}
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeStrict checks that body is one strict JSON object (valid UTF-8, no duplicate keys) whose
// keys are exactly among fields (case matters), then decodes it into v. An empty body is decoded as
// {}.
func decodeStrict(body []byte, v any, fields ...string) error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	if err := jsoncheck.Object(body, jsoncheck.Limits{MaxDepth: maxBodyDepth}); err != nil {
		var je *jsoncheck.Error
		if errors.As(err, &je) { // the operator's own request: name the key
			return badRequest("invalid_json", "", "request body: %s", je.QuotedError())
		}
		return badRequest("invalid_json", "", "request body: %v", err)
	}
	var bad string
	gjson.ParseBytes(body).ForEach(func(k, _ gjson.Result) bool {
		for _, f := range fields {
			if k.String() == f {
				return true
			}
		}
		bad = k.String()
		return false
	})
	if bad != "" {
		if len(fields) == 0 {
			return badRequest("invalid_request", bad, "unknown field %q: this request takes no body, or {}", bad)
		}
		return badRequest("invalid_request", bad, "unknown field %q; fields: %s", bad, strings.Join(fields, ", "))
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return badRequest("invalid_request", te.Field, "field %q: got a JSON %s, want %s", te.Field, te.Value, jsonTypeName(te.Type.String()))
		}
		return badRequest("invalid_request", "", "request body: %v", err)
	}
	return nil
}

func jsonTypeName(goType string) string {
	switch {
	case strings.HasPrefix(goType, "int"), strings.HasPrefix(goType, "*int"):
		return "an integer"
	case strings.HasSuffix(goType, "bool"):
		return "true or false"
	case strings.HasSuffix(goType, "string"):
		return "a string"
	case strings.HasPrefix(goType, "map"):
		return "an object"
	}
	return goType
}

// params checks that the query has only the allowed parameters, and returns it.
func params(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("invalid_request", "", "query string: %v", err)
	}
	for k := range q {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			if len(allowed) == 0 {
				return nil, badRequest("invalid_request", k, "unknown query parameter %q: this request takes none", k)
			}
			return nil, badRequest("invalid_request", k, "unknown query parameter %q; parameters: %s", k, strings.Join(allowed, ", "))
		}
	}
	return q, nil
}

// actor is who makes the change: HeaderActor, else DefaultActor.
// change reads what every changing request without query parameters starts with: the actor named by
// its header and its body.
func change(w http.ResponseWriter, r *http.Request) (who string, body []byte, err error) {
	if _, err := params(r); err != nil {
		return "", nil, err
	}
	if who, err = actor(r); err != nil {
		return "", nil, err
	}
	body, err = readBody(w, r)
	return who, body, err
}

func actor(r *http.Request) (string, error) {
	a := strings.TrimSpace(r.Header.Get(HeaderActor))
	if a == "" {
		return DefaultActor, nil
	}
	if err := plainText(a, maxActorLen); err != nil {
		return "", badRequest("invalid_request", HeaderActor, "header %s: %v", HeaderActor, err)
	}
	return a, nil
}

// plainText checks a short operator-supplied string: valid UTF-8, no control characters, at most
// max bytes.
func plainText(s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("at most %d bytes, got %d", max, len(s))
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return fmt.Errorf("control character %U not allowed", r)
		}
	}
	return nil
}

// writeJSON answers v as JSON (HTML characters not escaped: operators read diffs and templates).
func writeJSON(w http.ResponseWriter, status int, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("admin: encode response: %w", err)
	}
	writeRaw(w, status, buf.Bytes())
	return nil
}

func writeRaw(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// record sends the event of a change to the Recorder and logs it.
func (s *server) record(r *http.Request, e audit.Event) {
	id, _ := r.Context().Value(requestIDKey{}).(string)
	e.Time = time.Now().UTC()
	e.RequestID = id
	s.log.Info("admin: change", "request_id", id, "kind", e.Kind, "target", e.Target, "version", e.Version,
		"verdict", e.Verdict, "actor", e.Actor)
	if s.o.Recorder != nil {
		s.o.Recorder.Record(r.Context(), e)
	}
}
