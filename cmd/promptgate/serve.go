package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow"
	"github.com/promptgate/promptgate/policy/learn"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/admin"
	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/mcp"
	"github.com/promptgate/promptgate/proxy/mitm"
	"github.com/promptgate/promptgate/proxy/origin"
	"github.com/promptgate/promptgate/proxy/owners"
	"github.com/promptgate/promptgate/proxy/policytest"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
	"github.com/promptgate/promptgate/proxy/telemetry/redact"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
	"github.com/promptgate/promptgate/proxy/toolseen"
)

// serveFlags are the flags of `promptgate serve`, checked: the upstreams parsed, their keys bound.
type serveFlags struct {
	listen, adminListen, proxyListen string
	// mcpListen is the MCP door's address, "" when it is off; mcpToken is PROMPTGATE_MCP_TOKEN.
	mcpListen, mcpToken string
	snapshot            string
	store               *storeFlags
	// upstreams are the base URLs and bound keys of the upstream table's lines, by name.
	upstreams map[string]proxy.Upstream
	// confirmKey is the HMAC key of confirmation codes (EnvConfirmKey), "" for a random one.
	confirmKey string
	// fs is the flag set, for what was given on the command line.
	fs *flag.FlagSet
}

// serve wires promptgate's parts together and serves until ctx ends: the pipeline, telemetry, the
// decision log, the proxy listener, the admin listener and the HTTPS-proxy door.
func serve(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env) error {
	f, err := parseServeFlags(args, stderr, getenv)
	if err != nil {
		return err
	}
	return serveWith(ctx, f, stdout, stderr, getenv, nil)
}

// serveWith is serve with its flags read. started, when not nil, is called once every listener is
// up and the start lines are printed, with the proxy and admin listeners' addresses.
func serveWith(ctx context.Context, f *serveFlags, stdout, stderr io.Writer, getenv env, started func(proxyAddr, adminAddr net.Addr)) error {
	log, err := newLogger(stderr, getenv)
	if err != nil {
		return err
	}
	for _, uf := range upstreamFlags() {
		logCleartextKey(log, "--"+uf.flag, f.upstreams[uf.name], uf.keyEnv)
	}

	p, err := openPipelineSnapshot(ctx, f.store, false, getenv, log, f.snapshot)
	if err != nil {
		return err
	}
	defer p.Close()

	tr, trCfg, err := tracing.FromEnv(ctx, getenv, Version)
	if err != nil {
		return err
	}
	if tr != nil {
		log.Info("tracing on", "endpoint", trCfg.Endpoint, "protocol", trCfg.Protocol, "service", trCfg.ServiceName)
		// Deferred before the listeners' shutdown, so run after it: the last spans are sent.
		defer shutdownTracing(tr, log)
	}
	m := metrics.New(p.defs.Versions)
	if p.host != nil {
		p.host.Observe(m.Plugin)
	}
	m.StoreConnected(func() bool { ok, _ := storeConnected(p.store); return ok })
	m.DefinitionsStale(func() bool { return p.defs.Stale() != "" })
	sinks, recorder, err := openAudit(f, p, m, getenv, log)
	if err != nil {
		return err
	}
	defer sinks.Close()
	learned, err := learn.Open(learnPath(sinks.Ring.Path()), learn.Options{Log: log})
	if err != nil {
		return err
	}
	defer learned.Close()
	m.LearnDropped(learned.Dropped)

	var ready atomic.Bool
	seen := toolseen.New(0)
	base, err := proxyOptions(f, p, &ready, seen, recorder, m, tr, log)
	if err != nil {
		return err
	}
	base.Learn = learned
	srv, err := proxy.New(base)
	if err != nil {
		return err
	}
	// The HTTPS-proxy door is built before any listener is bound, so that a config error is
	// reported as such, whatever the state of the ports.
	ls := &listeners{limits: p.cfg.Limits, log: log, errc: make(chan error, 4)}
	defer ls.shutdown()
	mcpDoor, err := newMCPDoor(f, p, base, log)
	if err != nil {
		return err
	}
	var door *mitm.Door
	if f.proxyListen != "" {
		if door, err = newDoor(p.cfg.MITM, base, log, getenv(EnvProxyToken), ls.own.list, mcpDoor); err != nil {
			return err
		}
	}

	addr, err := ls.start("proxy listener", f.listen, srv, false)
	if err != nil {
		return err
	}
	// The lines on stdout are printed once every listener is up and /readyz answers 200, so whoever
	// waits for them (a supervisor, a test) can send traffic at once.
	lines := []string{fmt.Sprintf("promptgate %s listening on http://%s/v1 (upstream %s)", Version, addr, redact.Parsed(f.upstreams["openai"].URL))}
	adminHandler, err := admin.New(admin.Options{
		Token: getenv(EnvAdminToken), Hosts: p.cfg.Listen.Hosts, Store: p.store, Audit: sinks.Ring, Recorder: recorder, Metrics: m.Handler(), Log: log,
		Tools: seen, ToolPolicy: p.cfg.Tools, Stale: p.defs.Stale, Gatherer: m.Registry(), Plugins: p.pluginStatus,
		Preview: p.engine.Preview, MCP: mcpAdmin(mcpDoor, recorder), Learn: learned,
		Tests: &policytest.Config{Policy: p.cfg.Policy(), Settings: p.settings, Limits: p.cfg.Limits},
	})
	if err != nil {
		return err
	}
	aaddr, err := ls.start("admin listener", f.adminListen, adminHandler, true)
	if err != nil {
		return err
	}
	log.Info("admin API", "listen", aaddr.String(), "token", getenv(EnvAdminToken) != "")
	lines = append(lines, fmt.Sprintf("promptgate admin API on http://%s (console: http://%s%s)", aaddr, aaddr, admin.PathConsole))
	if mcpDoor != nil && f.mcpListen != "" {
		maddr, err := ls.start("MCP listener", f.mcpListen, mcpDoor, false)
		if err != nil {
			return err
		}
		log.Info("MCP door open", "listen", maddr.String(), "servers", len(p.cfg.MCP.Servers), "token", f.mcpToken != "")
		lines = append(lines, fmt.Sprintf("promptgate MCP door on http://%s%s<server>", maddr, mcp.PathPrefix))
	} else if f.mcpListen != "" {
		log.Warn("--mcp-listen is set but the config names no MCP server (mcp.servers): the MCP door stays closed")
	}
	if door != nil {
		daddr, err := ls.start("HTTPS-proxy listener", f.proxyListen, door, false)
		if err != nil {
			return err
		}
		log.Info("HTTPS-proxy door open", "listen", daddr.String(), "intercepted_hosts", p.cfg.MITM.Hosts, "passthrough", *p.cfg.MITM.Passthrough,
			"allow_private_destinations", p.cfg.MITM.AllowPrivateDestinations, "proxy_token", getenv(EnvProxyToken) != "")
		lines = append(lines, fmt.Sprintf("promptgate HTTPS-proxy door on %s (HTTPS_PROXY=http://%s)", daddr, daddr))
	} else if p.cfg.MITM != nil {
		// The config asks for interception but no door is open: say so rather than ignore the key.
		log.Warn("config has mitm: but the HTTPS-proxy door is off; give --proxy-listen (or " + EnvProxyListen + ") to open it")
	}
	ready.Store(true)
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	if started != nil {
		started(addr, aaddr)
	}
	log.Info("promptgate serving", "version", Version, "listen", addr.String(), "upstream", redact.Parsed(f.upstreams["openai"].URL), "store", storeName(f.store))

	select {
	case err := <-ls.errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing requests in flight")
	return nil
}

// parseServeFlags reads serve's flags and checks them: the upstream URLs, the listen addresses
// against their tokens, the operator keys bound to their upstreams.
func parseServeFlags(args []string, stderr io.Writer, getenv env) (*serveFlags, error) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f := &serveFlags{fs: fs, upstreams: map[string]proxy.Upstream{}}
	bases := map[string]*string{}
	fs.StringVar(&f.listen, "listen", orEnv(getenv, EnvListen, DefaultListen), "OpenAI-compatible listener; clients use base URL http://ADDR/v1 (env "+EnvListen+")")
	for _, uf := range upstreamFlags() {
		bases[uf.name] = fs.String(uf.flag, orEnv(getenv, uf.env, uf.def), uf.help+" (env "+uf.env+")")
	}
	fs.StringVar(&f.adminListen, "admin-listen", orEnv(getenv, EnvAdminListen, DefaultAdminListen), "admin listener; a non-loopback address needs "+EnvAdminToken+" (env "+EnvAdminListen+")")
	fs.StringVar(&f.proxyListen, "proxy-listen", getenv(EnvProxyListen), "HTTPS-proxy (HTTPS_PROXY=) listener, off when empty (env "+EnvProxyListen+")")
	fs.StringVar(&f.mcpListen, "mcp-listen", getenv(EnvMCPListen), "MCP door: the config's mcp.servers at /mcp/NAME, off when empty; a non-loopback address needs "+EnvMCPToken+" (env "+EnvMCPListen+")")
	f.store = addStoreFlags(fs, getenv)
	fs.StringVar(&f.snapshot, "store-snapshot", orEnv(getenv, EnvStoreSnapshot, DefaultStoreSnapshot), "with an etcd --store: file that keeps the last snapshot read, served at start while etcd is unreachable (env "+EnvStoreSnapshot+")")
	args, err := parseFlags(fs, args, stderr)
	if err != nil {
		return nil, err
	}
	if len(args) > 0 {
		return nil, usageError{fmt.Sprintf("serve takes no arguments, got %q", args)}
	}
	for _, uf := range upstreamFlags() {
		u, err := parseBaseURL("--"+uf.flag, *bases[uf.name], uf.keyEnv)
		if err != nil {
			return nil, err
		}
		f.upstreams[uf.name] = proxy.Upstream{URL: u}
	}
	if err := checkAdminListen(f.adminListen, getenv(EnvAdminToken)); err != nil {
		return nil, err
	}
	if f.proxyListen != "" {
		if err := checkProxyListen(f.proxyListen, getenv(EnvProxyToken)); err != nil {
			return nil, err
		}
	}
	f.mcpToken = getenv(EnvMCPToken)
	if f.mcpListen != "" {
		if err := checkMCPListen(f.mcpListen, f.mcpToken); err != nil {
			return nil, err
		}
	}
	for _, uf := range upstreamFlags() {
		up := f.upstreams[uf.name]
		if up.Key, err = bindKey("--"+uf.flag, up.URL, uf.keyEnv, getenv(uf.keyEnv)); err != nil {
			return nil, err
		}
		f.upstreams[uf.name] = up
	}
	f.confirmKey = getenv(EnvConfirmKey)
	if n := len(f.confirmKey); n > 0 && n < flow.MinConfirmKey {
		return nil, usageError{fmt.Sprintf("%s is %d bytes: give at least %d random bytes (e.g. the output of `openssl rand -base64 48`), the same on every instance that must accept another's confirmation codes", EnvConfirmKey, n, flow.MinConfirmKey)}
	}
	return f, nil
}

// openAudit opens the decision log's sinks (the ring, next to the instance's own state unless
// audit.path says, and audit.file) and returns the recorder every decision goes to: the log, the
// metrics and the sinks.
func openAudit(f *serveFlags, p *pipeline, m *metrics.Metrics, getenv env, log *slog.Logger) (*audit.Sinks, audit.Multi, error) {
	ringPath := p.cfg.Audit.Path
	if ringPath == "" {
		ringPath = defaultAuditPath(f.store, f.snapshot)
	}
	if spec, err := parseStoreSpec("--store", f.store.store, f.store.db); err == nil && spec.etcd() && dbSet(f.fs, getenv) {
		log.Warn("--db is not used with an etcd --store: the definitions are in etcd, and the audit ring defaults to a file next to --store-snapshot", "db", f.store.db, "auditRing", ringPath)
	}
	sinks, err := p.cfg.Audit.Open(ringPath, log)
	if err != nil {
		return nil, nil, err
	}
	m.AuditSink("ring", sinks.Ring.Stats)
	if sinks.File != nil {
		m.AuditSink("file", sinks.File.Stats)
	}
	return sinks, append(audit.Multi{sinks.Lines, m}, sinks.Recorders()...), nil
}

// proxyOptions are the options of every proxy handler serve builds (the listener's, and each door
// pipeline's with the upstreams at its origin): readiness, degradation, the listen guard, upstreams
// and keys, audit, telemetry.
func proxyOptions(f *serveFlags, p *pipeline, ready *atomic.Bool, seen *toolseen.Memory, rec audit.Recorder,
	m *metrics.Metrics, tr *tracing.Tracing, log *slog.Logger) (proxy.Options, error) {
	listenGuard, err := guard.New(p.cfg.Listen)
	if err != nil {
		return proxy.Options{}, err
	}
	confirmer, err := proxy.NewConfirmer(f.confirmKey)
	if err != nil {
		return proxy.Options{}, err
	}
	if f.confirmKey == "" {
		log.Info(EnvConfirmKey + " is not set: confirmation codes of held calls are signed with a random key of this start, " +
			"so a code holds on this instance only, until it restarts; set the same key on every instance of a fleet")
	}
	return proxy.Options{
		Engine: p.engine, Guard: listenGuard, Tools: seen, Upstreams: f.upstreams,
		Confirmer: confirmer, Violations: flow.NewViolations(0, 0, nil),
		// One record for the listener and every door pipeline: a response created through one is
		// its creator's through the other.
		Owners: owners.New(0),
		Audit:  rec, AuditArguments: p.cfg.Audit.IncludeArguments, Metrics: m, Tracing: tr, Log: log,
		Degraded: func() string {
			if ok, reason := storeConnected(p.store); !ok {
				return reason
			}
			return p.defs.Stale()
		},
		Ready: func() (bool, string) {
			if !ready.Load() {
				return false, "starting"
			}
			if p.host != nil {
				return p.host.Ready()
			}
			return true, ""
		},
	}, nil
}

// shutdownTracing sends the last spans.
func shutdownTracing(tr *tracing.Tracing, log *slog.Logger) {
	flush, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(flush); err != nil {
		log.Warn("tracing: spans not sent at shutdown", "err", err)
	}
}

// listeners are serve's HTTP servers, started one by one and shut down together.
type listeners struct {
	limits  proxy.Limits
	log     *slog.Logger
	servers []*http.Server
	own     ownAddrs // every listener's address, for the door to refuse
	errc    chan error
}

// start binds addr and serves h on it (see proxy.Limits.HTTPServer for wholeRequest).
func (l *listeners) start(name, addr string, h http.Handler, wholeRequest bool) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen %s: %w", name, addr, err)
	}
	l.own.add(ln.Addr())
	hs := l.limits.HTTPServer(h, wholeRequest, l.log)
	l.servers = append(l.servers, hs)
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			l.errc <- fmt.Errorf("%s: %w", name, err)
		}
	}()
	return ln.Addr(), nil
}

// shutdown finishes the requests in flight, for 30 s at most.
func (l *listeners) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, hs := range l.servers {
		_ = hs.Shutdown(ctx)
	}
}

// newDoor builds the HTTPS-proxy door from the config's mitm section; intercepted origins run the
// same pipeline as the base-URL listener, with the origin the client asked for as every upstream.
// The operator keys in base stay bound to the configured upstreams' origins, so an origin gets a
// key only if it is the key's own. The pipelines share one in-flight cap. Passthrough never reaches
// the addresses own returns.
func newDoor(c *mitm.Config, base proxy.Options, log *slog.Logger, token string, own func() []net.Addr, mcpDoor *mcp.Door) (*mitm.Door, error) {
	if c == nil {
		return nil, usageError{"--proxy-listen needs a mitm: section in the config (caCert, caKey, hosts); create the CA with `promptgate ca init`"}
	}
	ca, roots, err := c.Load()
	if err != nil {
		return nil, err
	}
	tr := proxy.NewTransport()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	inFlight := new(atomic.Int64) // the door's requests, whatever their origin, under one limits.maxInFlight
	return mitm.New(mitm.Options{
		CA: ca, Hosts: c.Hosts, Passthrough: *c.Passthrough, Log: log,
		HandshakeTimeout: c.HandshakeTimeout, AllowPrivate: c.AllowPrivateDestinations,
		MaxTunnels: c.MaxTunnels, TunnelIdleTimeout: c.TunnelIdleTimeout,
		HeaderReadTimeout: base.Engine.Limits().HeaderReadTimeout, IdleTimeout: base.Engine.Limits().IdleTimeout,
		Own: own, Token: token,
		Handler: func(o origin.Origin) (http.Handler, error) {
			if h := mcpDoor.ForOrigin(string(o)); h != nil {
				return h, nil // a configured MCP server's origin: the MCP door's policy
			}
			opts := base.ForOrigin(o)
			opts.Transport = tr
			opts.InFlight = inFlight
			return proxy.New(opts)
		},
	})
}

// ownAddrs collects the addresses promptgate listens on, as they are bound.
type ownAddrs struct {
	mu    sync.Mutex
	addrs []net.Addr
}

func (o *ownAddrs) add(a net.Addr) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.addrs = append(o.addrs, a)
}

func (o *ownAddrs) list() []net.Addr {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.addrs)
}

// bindKey binds an operator key to its upstream's origin. A key goes over plain HTTP only to a
// loopback upstream (serve logs it); any other http:// upstream with a key is refused.
func bindKey(flagName string, u *url.URL, envName, secret string) (proxy.Key, error) {
	if secret != "" && u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		return proxy.Key{}, usageError{fmt.Sprintf("%s %q is plain HTTP and %s is set: the key would cross the network in cleartext; use an https:// URL (http:// is accepted only for a loopback upstream, e.g. http://127.0.0.1:11434/v1)", flagName, redact.Parsed(u), envName)}
	}
	k, err := proxy.BindKey(secret, u)
	if err != nil {
		return proxy.Key{}, usageError{fmt.Sprintf("%s %q: %v", flagName, redact.Parsed(u), err)}
	}
	return k, nil
}

// logCleartextKey says at start that a key goes to a (loopback) upstream over plain HTTP.
func logCleartextKey(log *slog.Logger, flagName string, up proxy.Upstream, envName string) {
	if up.Key.Secret != "" && up.URL.Scheme == "http" {
		log.Warn(flagName+" is plain HTTP on loopback: "+envName+" is sent unencrypted, on this machine only", "upstream", redact.Parsed(up.URL))
	}
}

// upstreamFlag is how serve takes the base URL and the key of a line of the upstream table.
type upstreamFlag struct {
	name                   string // the line (proxy.UpstreamLine.Name)
	flag, env, keyEnv, def string
	help                   string
}

// upstreamFlags are serve's flags of the upstream table's lines, one each.
func upstreamFlags() []upstreamFlag {
	return []upstreamFlag{
		{name: "openai", flag: "upstream", env: EnvUpstream, keyEnv: EnvUpstreamKey, def: DefaultUpstream, help: "upstream base URL; /v1/X goes to <upstream>/X"},
		{name: "anthropic", flag: "anthropic-upstream", env: EnvAnthropicUpstream, keyEnv: EnvAnthropicKey, def: DefaultAnthropicUpstream, help: "base URL for /v1/messages"},
		{name: "gemini", flag: "gemini-upstream", env: EnvGeminiUpstream, keyEnv: EnvGeminiKey, def: DefaultGeminiUpstream, help: "base URL of the Gemini API; /v1beta/X goes to <it>/v1beta/X"},
	}
}

// parseBaseURL checks an upstream base URL: http or https, with a host, without user info, query or
// fragment. keyEnv names the variable that carries the upstream's key instead. An error never shows
// what the URL held as user info or query.
func parseBaseURL(flagName, s, keyEnv string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Sprintf("%s %q: give a base URL such as https://api.openai.com/v1", flagName, redact.URL(s))}
	}
	if u.User != nil {
		return nil, usageError{fmt.Sprintf("%s %q: a base URL carries no user info (user:password@), which would reach logs and error messages; give the upstream's key in %s", flagName, redact.Parsed(u), keyEnv)}
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, usageError{fmt.Sprintf("%s %q: a base URL has no query or fragment; give the upstream's key in %s", flagName, redact.Parsed(u), keyEnv)}
	}
	return u, nil
}

// checkAdminListen refuses a non-loopback admin address unless a token is set.
func checkAdminListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError{fmt.Sprintf("--admin-listen %q: use HOST:PORT, e.g. %s", addr, DefaultAdminListen)}
	}
	if token != "" || loopbackHost(host) {
		return nil
	}
	return usageError{fmt.Sprintf("--admin-listen %q is not a loopback address: set %s to expose the admin API beyond this machine", addr, EnvAdminToken)}
}

// checkMCPListen refuses a non-loopback MCP door unless PROMPTGATE_MCP_TOKEN is set.
func checkMCPListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError{fmt.Sprintf("--mcp-listen %q: use HOST:PORT, e.g. 127.0.0.1:8790", addr)}
	}
	if token != "" || loopbackHost(host) {
		return nil
	}
	return usageError{fmt.Sprintf("--mcp-listen %q is not a loopback address: set %s so that clients must send it (%s), or listen on 127.0.0.1", addr, EnvMCPToken, mcp.HeaderToken)}
}

// newMCPDoor builds the MCP door where the config names MCP servers (nil otherwise): it shares the
// proxy listener's engine, join, confirmer, memory of caught conversations, decision log and listen
// guard, and keeps its pins in the store. It trusts the roots of mitm.upstreamCA besides the
// system's, as the HTTPS-proxy door does for the origins it intercepts (an MCP server's among
// them).
func newMCPDoor(f *serveFlags, p *pipeline, base proxy.Options, log *slog.Logger) (*mcp.Door, error) {
	if len(p.cfg.MCP.Servers) == 0 {
		return nil, nil
	}
	tr := proxy.NewTransport()
	if c := p.cfg.MITM; c != nil && c.UpstreamCA != "" {
		roots, err := mitm.Roots(c.UpstreamCA)
		if err != nil {
			return nil, err
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	}
	return mcp.New(mcp.Options{Config: p.cfg.MCP, Engine: p.engine, Store: p.store, Calls: p.calls, Confirmer: base.Confirmer,
		Violations: base.Violations, Audit: base.Audit, Guard: base.Guard, Token: f.mcpToken, Limits: p.cfg.Limits,
		Transport: tr, Tracing: base.Tracing, Log: log})
}

// mcpAdmin is the MCP door's admin routes, nil without a door.
func mcpAdmin(d *mcp.Door, rec audit.Recorder) http.Handler {
	if d == nil {
		return nil
	}
	return d.Admin(rec)
}

// checkProxyListen refuses a non-loopback HTTPS-proxy door unless proxy authentication is on.
func checkProxyListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError{fmt.Sprintf("--proxy-listen %q: use HOST:PORT, e.g. 127.0.0.1:8789", addr)}
	}
	if token != "" || loopbackHost(host) {
		return nil
	}
	return usageError{fmt.Sprintf("--proxy-listen %q is not a loopback address: set %s so that clients must authenticate (Proxy-Authorization), or listen on 127.0.0.1", addr, EnvProxyToken)}
}

// loopbackHost reports whether host is localhost or a loopback IP address.
func loopbackHost(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// defaultAuditPath is the audit ring file when the config sets no audit.path. It lives with the
// instance's own local state: with a bbolt store, next to that file ("pg.db" -> "pg.audit.db", the
// --store bbolt:PATH when given, else --db); with an etcd store, next to the --store-snapshot file
// ("/data/snap.json" -> "/data/snap.audit.db"), or "promptgate.audit.db" in the working folder when
// there is none. --db plays no part with etcd: it names no file of the instance.
func defaultAuditPath(sf *storeFlags, snapshot string) string {
	spec, err := parseStoreSpec("--store", sf.store, sf.db)
	switch {
	case err != nil: // serve stopped on it already; be defined anyway
		return auditPath(sf.db)
	case !spec.etcd():
		return auditPath(spec.boltPath)
	case snapshot == "":
		return auditPath(DefaultDB)
	}
	return strings.TrimSuffix(snapshot, filepath.Ext(snapshot)) + ".audit.db"
}

// dbSet reports whether --db (or its environment variable) was given.
func dbSet(fs *flag.FlagSet, getenv env) bool {
	set := getenv(EnvDB) != ""
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "db" })
	return set
}

// learnPath is learn mode's file, next to the audit ring ("pg.audit.db" -> "pg.learn.db").
func learnPath(ring string) string {
	if base, ok := strings.CutSuffix(ring, ".audit.db"); ok {
		return base + ".learn.db"
	}
	ext := filepath.Ext(ring)
	return strings.TrimSuffix(ring, ext) + ".learn" + ext
}

// auditPath is the default audit ring file: the DB path with ".audit" before its extension.
func auditPath(db string) string {
	ext := filepath.Ext(db)
	return strings.TrimSuffix(db, ext) + ".audit" + ext
}
