// Package mcp is promptgate's MCP door: a listener (--mcp-listen) that reverse-proxies the
// Streamable HTTP MCP servers named in the config's mcp section, at /mcp/NAME, under the same
// policy as the model's calls. The protocol chosen for the agent (by route, key or header) governs
// both paths: tools/list answers are filtered by the protocol's allowlist ∩ enablement ∩ access
// policy; tools/call requests are vetted by the tool's pinned input schema, the argument rules and,
// for a call no model call released, the information-flow rules, before they reach the server. A
// tools/call is matched to the model's call that promptgate released on a rewritten API
// (proxy/mcpjoin), and may be required to match. Each server's tool definitions are pinned (name,
// description, input schema digest): a change is held back until an operator approves it in the
// admin API, or only reported. Stateless requests (2026-07-28) whose Mcp-Method, Mcp-Name or
// Mcp-Param headers disagree with their body are refused as parser differentials.
//
// It owns the door's HTTP handling, the JSON-RPC reading, the pins and the description scan, and
// the admin routes under /admin/mcp/. It does not choose protocols, vet arguments or judge flows
// itself (proxy.Engine's Governance, policy/vet and policy/flow do), nor keep the decision log
// (policy/audit).
package mcp

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/mcpjoin"
	"github.com/promptgate/promptgate/proxy/origin"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
)

// PathPrefix is where the door serves its servers: /mcp/NAME.
const PathPrefix = "/mcp/"

// HeaderToken carries PROMPTGATE_MCP_TOKEN when one is set; it never goes upstream.
const HeaderToken = "X-Promptgate-Mcp-Token"

// Options configure a Door.
type Options struct {
	// Config is the config file's mcp section, validated. Required.
	Config Config
	// Engine chooses the protocol of each request (Engine.Govern). Required.
	Engine *proxy.Engine
	// Calls is the join with the model's calls; the proxy listener must be given the same. nil: no
	// join (every call is unmatched).
	Calls *mcpjoin.Record
	// Store keeps the pinned definitions (the store's mcppins kind, versioned, shared by a fleet);
	// nil keeps them in memory, per instance. It must be the store the Engine's definitions are
	// read from.
	Store PinStore
	// Pins holds the pinned definitions; nil gives the door its own, over Store.
	Pins *Pins
	// Confirmer and Violations are the proxy listener's: codes shown on either path release calls
	// on both.
	Confirmer  *flow.Confirmer
	Violations *flow.Violations
	// Audit receives every decision; nil logs them.
	Audit audit.Recorder
	// Guard says which Hosts and browser origins are answered besides loopback; nil adds none.
	Guard *guard.Policy
	// Token is PROMPTGATE_MCP_TOKEN: when set, every request must carry it in HeaderToken.
	Token string
	// Limits are the engine's (body cap, deadlines, in-flight cap, JSON depth).
	Limits proxy.Limits
	// Transport reaches the servers; nil means proxy.NewTransport().
	Transport http.RoundTripper
	// Tracing, when not nil, records a span per request and per decision.
	Tracing *tracing.Tracing
	Log     *slog.Logger
}

// Door is the MCP listener's handler.
type Door struct {
	o        Options
	log      *slog.Logger
	servers  map[string]*Server
	client   *http.Client
	inFlight atomic.Int64
	recent   *recentCalls
	seq      atomic.Int64
	// sessions and elicits are the confirmation over MCP (elicit.go).
	sessions *sessionCaps
	elicits  *elicitations
}

var _ http.Handler = (*Door)(nil)

// New builds the door.
func New(o Options) (*Door, error) {
	if o.Engine == nil {
		return nil, errors.New("mcp: the door needs the engine")
	}
	o.Config.ApplyDefaults()
	if errs := o.Config.Validate("mcp"); len(errs) > 0 {
		return nil, fmt.Errorf("mcp: %w", errors.Join(errs...))
	}
	o.Limits.ApplyDefaults()
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Audit == nil {
		o.Audit = audit.Log{Logger: o.Log}
	}
	if o.Pins == nil {
		names := make([]string, len(o.Config.Servers))
		for i, s := range o.Config.Servers {
			names[i] = s.Name
		}
		o.Pins = NewPins(PinsOptions{Store: o.Store, Active: o.Engine.PinSet, Log: o.Log}, names...)
	}
	if o.Transport == nil {
		o.Transport = proxy.NewTransport()
	}
	if o.Guard == nil {
		g, err := guard.New(guard.Config{})
		if err != nil {
			return nil, fmt.Errorf("mcp: %w", err)
		}
		o.Guard = g
	}
	d := &Door{o: o, log: o.Log, servers: map[string]*Server{}, recent: newRecentCalls(maxRecent), sessions: newSessionCaps(), elicits: newElicitations(),
		client: &http.Client{Transport: o.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	for i := range d.o.Config.Servers {
		s := &d.o.Config.Servers[i]
		d.servers[s.Name] = s
	}
	return d, nil
}

// Pins are the door's pinned definitions.
func (d *Door) Pins() *Pins { return d.o.Pins }

// ServeHTTP answers what the listener does not serve (a Host that is not loopback or listed, a
// cross-site browser request, OPTIONS, a missing token, an unknown server), then serves the
// server's endpoint.
func (d *Door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := proxy.RequestID(r, "mcp-")
	w.Header().Set(proxy.HeaderRequestID, id)
	ctx, span := d.o.Tracing.StartServer(r.Context(), "promptgate.mcp")
	defer span.End()
	r = r.WithContext(ctx)
	ref := d.o.Guard.CheckHost(r)
	if ref == nil && r.Method == http.MethodOptions {
		if ref = d.o.Guard.Preflight(w, r); ref == nil {
			return
		}
	}
	if ref == nil {
		ref = d.o.Guard.CheckBrowser(r)
	}
	if ref != nil {
		proxy.WriteError(w, ref.Status, ref.Code, ref.Message, "")
		return
	}
	if d.o.Token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(HeaderToken)), []byte(d.o.Token)) != 1 {
		proxy.WriteError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong token: send "+HeaderToken+": <PROMPTGATE_MCP_TOKEN>", "")
		return
	}
	name, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	srv := d.servers[name]
	if !ok || srv == nil {
		proxy.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no MCP server at %s: the door serves %s", r.URL.Path, d.paths()), "")
		return
	}
	if n := d.inFlight.Add(1); n > int64(d.o.Limits.MaxInFlight) {
		d.inFlight.Add(-1)
		w.Header().Set("Retry-After", "1")
		proxy.WriteError(w, http.StatusServiceUnavailable, "overloaded", "the MCP door is serving its limit of requests (limits.maxInFlight): retry shortly", "")
		return
	}
	defer d.inFlight.Add(-1)
	x := &exchange{d: d, srv: srv, id: id, w: w, r: r, log: d.log.With("request_id", id, "mcp_server", srv.Name)}
	switch r.Method {
	case http.MethodPost:
		x.post()
	case http.MethodDelete:
		x.deleteSession()
	case http.MethodGet:
		x.forward(nil, nil)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		proxy.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" is not part of MCP's Streamable HTTP transport", "")
	}
}

// deleteSession ends a session: DELETE has no body, and one with a body (which the door would pass
// unread) is refused.
func (x *exchange) deleteSession() {
	b, err := x.readBody()
	if err != nil || len(bytes.TrimSpace(b)) > 0 {
		x.record(audit.Event{Kind: KindCall, Verdict: audit.VerdictBlocked, Reason: errDeleteBody.Error()})
		x.rpcFail(http.StatusBadRequest, "", codeInvalidRequest, errDeleteBody.Error())
		return
	}
	x.d.sessions.drop(x.session())
	x.forward(nil, nil)
}

var errDeleteBody = errors.New("mcp: DELETE ends a session and carries no body")

// paths lists the servers' paths for an error message.
func (d *Door) paths() string {
	var out []string
	for name := range d.servers {
		out = append(out, PathPrefix+name)
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "no server (the config's mcp.servers is empty)"
	}
	return strings.Join(out, ", ")
}

// exchange is one request on the door.
type exchange struct {
	d   *Door
	srv *Server
	id  string
	w   http.ResponseWriter
	r   *http.Request
	log *slog.Logger
	// version is the protocol version the request speaks (POST only); batch whether its body is
	// one.
	version string
	batch   bool
	gov     governance
	// initForm is, for an initialize, whether its client declared form elicitation (nil otherwise).
	initForm *bool
	// hold is a call held for confirmation that the door puts to the user (elicit.go).
	hold *heldCall
}

// readBody reads the request body under the body cap and the body-read deadline.
func (x *exchange) readBody() ([]byte, error) {
	lim := x.d.o.Limits
	rc := http.NewResponseController(x.w)
	if rc.SetReadDeadline(time.Now().Add(lim.BodyReadTimeout)) == nil {
		defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
	}
	if x.r.ContentLength > lim.MaxBodyBytes {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(http.MaxBytesReader(x.w, x.r.Body, lim.MaxBodyBytes))
	var mb *http.MaxBytesError
	switch {
	case errors.As(err, &mb):
		return nil, errTooLarge
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, errBodyTimeout
	case err != nil:
		return nil, fmt.Errorf("mcp: reading the body: %w", err)
	}
	return b, nil
}

var (
	errTooLarge    = errors.New("mcp: the body is larger than limits.maxBodyBytes")
	errBodyTimeout = errors.New("mcp: the body did not arrive within limits.bodyReadTimeout")
)

// post serves a POST: each message of the body is read and decided, the ones that pass go to the
// server, and the door's own answers join the server's.
func (x *exchange) post() {
	body, err := x.readBody()
	switch {
	case errors.Is(err, errTooLarge):
		x.rpcFail(http.StatusRequestEntityTooLarge, "", codeInvalidRequest, err.Error())
		return
	case errors.Is(err, errBodyTimeout):
		x.rpcFail(http.StatusRequestTimeout, "", codeInvalidRequest, err.Error())
		return
	case err != nil:
		x.log.Debug("client went away while sending its body", "err", err)
		return
	}
	msgs, batch, err := parseBody(body, x.d.o.Limits.MaxJSONDepth)
	if err != nil {
		x.rpcRefuse(err)
		return
	}
	if x.version, err = versionOf(x.r.Header, msgs); err != nil {
		x.rpcRefuse(err)
		return
	}
	x.batch = batch
	if len(msgs) == 1 && msgs[0].method == "initialize" {
		form := formElicitation(msgs[0].params.Get("capabilities"))
		x.initForm = &form
	}
	if batch && !batchesAllowed(x.version) {
		x.rpcFail(http.StatusBadRequest, "", codeInvalidRequest, "mcp: protocol version "+x.version+" does not allow batches")
		return
	}
	if x.gov, err = x.d.govern(x.r, x.srv); err != nil {
		x.rpcFail(http.StatusForbidden, firstID(msgs), codeInvalidRequest, "mcp: "+err.Error())
		return
	}
	var forward []message
	var local [][]byte
	for _, m := range msgs {
		answer, pass := x.decide(m)
		if answer != nil {
			local = append(local, answer)
		}
		if !pass {
			continue
		}
		forward = append(forward, m)
	}
	if x.hold != nil {
		x.askUser(x.hold)
		return
	}
	if len(forward) == 0 {
		x.answerLocal(local, batch)
		return
	}
	out := body
	if len(forward) != len(msgs) {
		out = joinBatch(forward)
	}
	x.forward(out, local)
}

// firstID is the id of the first request of a body, "" when none has one.
func firstID(msgs []message) string {
	for _, m := range msgs {
		if m.id != "" {
			return m.id
		}
	}
	return ""
}

// joinBatch writes messages as a batch.
func joinBatch(msgs []message) []byte {
	out := []byte{'['}
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m.raw...)
	}
	return append(out, ']')
}

// decide answers one message or lets it pass: a client's answer to a question of the door's is the
// door's; a stateless request's headers (and any request's that sends them: a gateway may route by
// them whatever the version) must agree with it; tools/call is judged; a method the door
// does not know is refused unless mcp.unknownMethods is pass.
func (x *exchange) decide(m message) (answer []byte, pass bool) {
	if m.response {
		return nil, !x.answerElicitation(m)
	}
	if m.method == "" {
		return nil, true
	}
	if stateless(x.version) || namesRequest(x.r.Header) {
		if err := checkHeaders(x.r.Header, m, nil); err != nil {
			x.refusedDifferential(m, err)
			return x.errorFor(m, err), false
		}
	}
	switch {
	case m.method == "tools/call":
		return x.call(m)
	case knownMethod(m.method) || x.d.o.Config.UnknownMethods == MethodsPass:
		return nil, true
	}
	x.record(audit.Event{Kind: KindCall, Tool: "", Verdict: audit.VerdictBlocked, Reason: "method not served by the door (mcp.unknownMethods: refuse)"})
	return x.errorFor(m, &rpcError{code: codeMethodNotFound, msg: "mcp: method not found: promptgate's MCP door does not pass methods it does not know (mcp.unknownMethods)"}), false
}

// errorFor is the JSON-RPC error answering m (nil for a notification, which gets no answer).
func (x *exchange) errorFor(m message, err error) []byte {
	if m.id == "" {
		return nil
	}
	var re *rpcError
	if !errors.As(err, &re) {
		re = &rpcError{code: codeInvalidRequest, msg: err.Error()}
	}
	return errorMessage(m.id, re.code, re.msg)
}

// refusedDifferential records a stateless request refused because its headers and body disagree.
func (x *exchange) refusedDifferential(m message, err error) {
	x.record(audit.Event{Kind: KindCall, Tool: toolOf(m), Verdict: audit.VerdictBlocked, Reason: err.Error()})
}

// toolOf is the name a tools/call names, shown as notices show names.
func toolOf(m message) string {
	if m.method != "tools/call" {
		return ""
	}
	return m.params.Get("name").String()
}

// knownMethods are the MCP methods (requests and notifications) the door passes: those of the
// served versions. Notifications pass whatever their name.
var knownMethods = []string{"initialize", "ping", "server/discover", "subscriptions/listen", "tools/list", "tools/call",
	"resources/list", "resources/read", "resources/templates/list", "resources/subscribe", "resources/unsubscribe",
	"prompts/list", "prompts/get", "completion/complete", "logging/setLevel", "tasks/get", "tasks/list",
	"tasks/result", "tasks/cancel"}

func knownMethod(method string) bool {
	return strings.HasPrefix(method, "notifications/") || slices.Contains(knownMethods, method)
}

// rpcRefuse answers a refused body with its JSON-RPC error (400).
func (x *exchange) rpcRefuse(err error) {
	var re *rpcError
	if errors.As(err, &re) {
		x.record(audit.Event{Kind: KindCall, Verdict: audit.VerdictBlocked, Reason: re.msg})
		x.rpcFail(http.StatusBadRequest, "", re.code, re.msg)
		return
	}
	x.rpcFail(http.StatusBadRequest, "", codeInvalidRequest, err.Error())
}

// rpcFail answers with one JSON-RPC error.
func (x *exchange) rpcFail(status int, id string, code int, msg string) {
	x.w.Header().Set("Content-Type", "application/json")
	x.w.WriteHeader(status)
	_, _ = x.w.Write(errorMessage(id, code, msg))
}

// answerLocal answers a body the door answered whole: its answers (an array for a batch), or 202
// when there is nothing to answer (notifications and responses only).
func (x *exchange) answerLocal(local [][]byte, batch bool) {
	if len(local) == 0 {
		x.w.WriteHeader(http.StatusAccepted)
		return
	}
	x.w.Header().Set("Content-Type", "application/json")
	x.w.WriteHeader(http.StatusOK)
	if batch {
		_, _ = x.w.Write(joinRaw(local))
		return
	}
	_, _ = x.w.Write(local[0])
}

// joinRaw writes raw messages as a JSON array.
func joinRaw(msgs [][]byte) []byte {
	out := []byte{'['}
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, ']')
}

// record writes a decision of this exchange.
func (x *exchange) record(e audit.Event) {
	e.Time, e.RequestID = time.Now().UTC(), x.id
	if x.gov.eff != nil {
		e.Protocol, e.ProtocolVersion = x.gov.eff.ID, x.gov.eff.Version
	}
	e.Target = "mcp/" + x.srv.Name
	x.d.o.Audit.Record(x.r.Context(), e)
}

// contextOf is the request's context.
func (x *exchange) ctx() context.Context { return x.r.Context() }

// ForOrigin is the handler of the HTTPS-proxy door for a request to origin (scheme://host:port):
// where a configured server's URL has that origin, its requests to the server's path are served as
// /mcp/NAME here; nil when no server has it (a nil door has none).
func (d *Door) ForOrigin(o string) http.Handler {
	if d == nil {
		return nil
	}
	byPath := map[string]string{}
	for _, s := range d.o.Config.Servers {
		if so, err := origin.Of(s.Endpoint()); err == nil && string(so) == o {
			byPath[s.Endpoint().EscapedPath()] = s.Name
		}
	}
	if len(byPath) == 0 {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := byPath[r.URL.EscapedPath()]
		if !ok {
			proxy.WriteError(w, http.StatusNotFound, "not_found", "this origin is an MCP server's: only its endpoint is served", "")
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = PathPrefix+name, ""
		r2.Host = "127.0.0.1" // the door answers the intercepted request itself
		d.ServeHTTP(w, r2)
	})
}
