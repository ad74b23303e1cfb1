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
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/admin"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/proxy/guard"
	"github.com/promptgate/promptgate/proxy/metrics"
	"github.com/promptgate/promptgate/proxy/mitm"
	"github.com/promptgate/promptgate/proxy/origin"
	"github.com/promptgate/promptgate/proxy/redact"
	"github.com/promptgate/promptgate/proxy/toolseen"
	"github.com/promptgate/promptgate/proxy/tracing"
)

// serveFlags are the flags of `promptgate serve`.
type serveFlags struct {
	listen, upstream, adminListen, proxyListen, anthropicUpstream string
	snapshot                                                      string
	store                                                         *storeFlags
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f := serveFlags{}
	fs.StringVar(&f.listen, "listen", orEnv(getenv, EnvListen, DefaultListen), "OpenAI-compatible listener; clients use base URL http://ADDR/v1 (env "+EnvListen+")")
	fs.StringVar(&f.upstream, "upstream", orEnv(getenv, EnvUpstream, DefaultUpstream), "upstream base URL; /v1/X goes to <upstream>/X (env "+EnvUpstream+")")
	fs.StringVar(&f.adminListen, "admin-listen", orEnv(getenv, EnvAdminListen, DefaultAdminListen), "admin listener; a non-loopback address needs "+EnvAdminToken+" (env "+EnvAdminListen+")")
	fs.StringVar(&f.proxyListen, "proxy-listen", getenv(EnvProxyListen), "HTTPS-proxy (HTTPS_PROXY=) listener, off when empty (env "+EnvProxyListen+")")
	fs.StringVar(&f.anthropicUpstream, "anthropic-upstream", orEnv(getenv, EnvAnthropicUpstream, DefaultAnthropicUpstream), "base URL for /v1/messages (env "+EnvAnthropicUpstream+")")
	f.store = addStoreFlags(fs, getenv)
	fs.StringVar(&f.snapshot, "store-snapshot", orEnv(getenv, EnvStoreSnapshot, DefaultStoreSnapshot), "with an etcd --store: file that keeps the last snapshot read, served at start while etcd is unreachable (env "+EnvStoreSnapshot+")")
	args, err := parseFlags(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return usageError{fmt.Sprintf("serve takes no arguments, got %q", args)}
	}
	upstream, err := parseBaseURL("--upstream", f.upstream, EnvUpstreamKey)
	if err != nil {
		return err
	}
	anthropicUpstream, err := parseBaseURL("--anthropic-upstream", f.anthropicUpstream, EnvAnthropicKey)
	if err != nil {
		return err
	}
	if err := checkAdminListen(f.adminListen, getenv(EnvAdminToken)); err != nil {
		return err
	}
	if f.proxyListen != "" {
		if err := checkProxyListen(f.proxyListen, getenv(EnvProxyToken)); err != nil {
			return err
		}
	}
	upstreamKey, err := bindKey("--upstream", upstream, EnvUpstreamKey, getenv(EnvUpstreamKey))
	if err != nil {
		return err
	}
	anthropicKey, err := bindKey("--anthropic-upstream", anthropicUpstream, EnvAnthropicKey, getenv(EnvAnthropicKey))
	if err != nil {
		return err
	}
	log, err := newLogger(stderr, getenv)
	if err != nil {
		return err
	}
	logCleartextKey(log, "--upstream", upstream, EnvUpstreamKey, upstreamKey)
	logCleartextKey(log, "--anthropic-upstream", anthropicUpstream, EnvAnthropicKey, anthropicKey)

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
		defer func() {
			// After the listeners' shutdown (deferred later, so run first): the last spans are sent.
			flush, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := tr.Shutdown(flush); err != nil {
				log.Warn("tracing: spans not sent at shutdown", "err", err)
			}
		}()
	}

	var ready atomic.Bool
	m := metrics.New(p.defs.Versions)
	if p.host != nil {
		p.host.Observe(m.Plugin)
	}
	m.StoreConnected(func() bool { ok, _ := storeConnected(p.store); return ok })
	m.DefinitionsStale(func() bool { return p.defs.Stale() != "" })
	ringPath := p.cfg.Audit.Path
	if ringPath == "" {
		ringPath = defaultAuditPath(f.store, f.snapshot)
	}
	if spec, err := parseStoreSpec("--store", f.store.store, f.store.db); err == nil && spec.etcd() && dbSet(fs, getenv) {
		log.Warn("--db is not used with an etcd --store: the definitions are in etcd, and the audit ring defaults to a file next to --store-snapshot", "db", f.store.db, "auditRing", ringPath)
	}
	ring, err := audit.OpenRing(ringPath, p.cfg.Audit.RingSize, log)
	if err != nil {
		return err
	}
	defer ring.Close()
	m.AuditSink("ring", ring.Stats)
	decisions := audit.NewLogQueue(audit.Log{Logger: log}, audit.Options{}) // the decision lines, off the request path
	defer decisions.Close()
	recorder := audit.Multi{decisions, m, ring}
	if p.cfg.Audit.File != "" {
		jl, err := audit.OpenJSONL(p.cfg.Audit.File, log)
		if err != nil {
			return err
		}
		defer jl.Close()
		m.AuditSink("file", jl.Stats)
		recorder = append(recorder, jl)
	}
	listenGuard, err := guard.New(guard.Config{Hosts: p.cfg.Listen.Hosts, AllowedOrigins: p.cfg.Listen.AllowedOrigins, Section: "listen"})
	if err != nil {
		return err
	}
	seen := toolseen.New(0)
	base := proxy.Options{
		Engine:          p.engine,
		Guard:           listenGuard,
		Tools:           seen,
		UpstreamAPIKey:  upstreamKey,
		AnthropicAPIKey: anthropicKey,
		Audit:           recorder,
		AuditArguments:  p.cfg.Audit.IncludeArguments,
		Metrics:         m,
		Tracing:         tr,
		Log:             log,
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
	}
	opts := base
	opts.Upstream = upstream
	opts.AnthropicUpstream = anthropicUpstream
	srv, err := proxy.New(opts)
	if err != nil {
		return err
	}
	// The HTTPS-proxy door is built before any listener is bound, so that a config error is reported as
	// such, whatever the state of the ports.
	var own ownAddrs // every listener's address, for the door to refuse
	var door *mitm.Door
	if f.proxyListen != "" {
		if door, err = newDoor(p.cfg, base, log, getenv(EnvProxyToken), own.list); err != nil {
			return err
		}
	}
	var servers []*http.Server
	errc := make(chan error, 3)
	start := func(name, addr string, h http.Handler, wholeRequest bool) (net.Addr, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%s: listen %s: %w", name, addr, err)
		}
		own.add(ln.Addr())
		hs := httpServer(h, p.cfg.Limits, wholeRequest, log)
		servers = append(servers, hs)
		go func() {
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s: %w", name, err)
			}
		}()
		return ln.Addr(), nil
	}
	defer func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, hs := range servers {
			_ = hs.Shutdown(shutdown)
		}
	}()

	addr, err := start("proxy listener", f.listen, srv, false)
	if err != nil {
		return err
	}
	// The lines on stdout are printed once every listener is up and /readyz answers 200, so whoever
	// waits for them (a supervisor, a test) can send traffic at once.
	lines := []string{fmt.Sprintf("promptgate %s listening on http://%s/v1 (upstream %s)", Version, addr, redact.Parsed(upstream))}
	adminHandler, err := admin.New(admin.Options{
		Token: getenv(EnvAdminToken), Store: p.store, Audit: ring, Recorder: recorder, Metrics: m.Handler(), Log: log,
		Tools: seen, ToolPolicy: p.cfg.Tools, Stale: p.defs.Stale, Gatherer: m.Registry(), Plugins: p.pluginStatus,
		Preview: func(ctx context.Context, in proxy.Input) ([]byte, error) {
			if int64(len(in.Body)) > p.cfg.Limits.MaxBodyBytes {
				return nil, &http.MaxBytesError{Limit: p.cfg.Limits.MaxBodyBytes}
			}
			return p.engine.Preview(ctx, in)
		},
	})
	if err != nil {
		return err
	}
	aaddr, err := start("admin listener", f.adminListen, adminHandler, true)
	if err != nil {
		return err
	}
	log.Info("admin API", "listen", aaddr.String(), "token", getenv(EnvAdminToken) != "")
	lines = append(lines, fmt.Sprintf("promptgate admin API on http://%s (console: http://%s%s)", aaddr, aaddr, admin.PathConsole))
	if door != nil {
		daddr, err := start("HTTPS-proxy listener", f.proxyListen, door, false)
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
	log.Info("promptgate serving", "version", Version, "listen", addr.String(), "upstream", redact.Parsed(upstream), "store", storeName(f.store))

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing requests in flight")
	return nil
}

// httpServer is the HTTP server of a listener, with the config's header-read and idle timeouts. The proxy
// listener bounds the reading of each request's body itself (limits.bodyReadTimeout, cleared once the body is
// in, so that a long stream is never cut); with wholeRequest (the admin listener, whose answers are short) the
// server bounds headers and body together instead. The door's tunnels must not inherit a whole-request
// deadline either.
func httpServer(h http.Handler, l config.Limits, wholeRequest bool, log *slog.Logger) *http.Server {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: l.HeaderReadTimeout, IdleTimeout: l.IdleTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	if wholeRequest {
		hs.ReadTimeout = l.HeaderReadTimeout + l.BodyReadTimeout
	}
	return hs
}

// newDoor builds the HTTPS-proxy door from the config's mitm section; intercepted origins run the same
// pipeline as the base-URL listener, with the origin the client asked for as both upstreams. The operator
// keys in base stay bound to the configured upstreams' origins, so an origin gets a key only if it is the
// key's own. Passthrough never reaches the addresses own returns.
func newDoor(cfg *config.File, base proxy.Options, log *slog.Logger, token string, own func() []net.Addr) (*mitm.Door, error) {
	if cfg.MITM == nil {
		return nil, usageError{"--proxy-listen needs a mitm: section in the config (caCert, caKey, hosts); create the CA with `promptgate ca init`"}
	}
	ca, err := mitm.LoadCA(cfg.MITM.CACert, cfg.MITM.CAKey)
	if err != nil {
		return nil, err
	}
	roots, err := mitm.Roots(cfg.MITM.UpstreamCA)
	if err != nil {
		return nil, err
	}
	tr := proxy.NewTransport()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	return mitm.New(mitm.Options{
		CA: ca, Hosts: cfg.MITM.Hosts, Passthrough: *cfg.MITM.Passthrough, Log: log,
		HandshakeTimeout: cfg.MITM.HandshakeTimeout, AllowPrivate: cfg.MITM.AllowPrivateDestinations,
		Own: own, Token: token,
		Handler: func(o origin.Origin) (http.Handler, error) {
			opts := base
			opts.Upstream = o.URL("/v1")
			opts.AnthropicUpstream = o.URL("/v1")
			opts.Transport = tr
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

// bindKey binds an operator key to its upstream's origin. A key goes over plain HTTP only to a loopback
// upstream (serve logs it); any other http:// upstream with a key is refused.
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
func logCleartextKey(log *slog.Logger, flagName string, u *url.URL, envName string, k proxy.Key) {
	if k.Secret != "" && u.Scheme == "http" {
		log.Warn(flagName+" is plain HTTP on loopback: "+envName+" is sent unencrypted, on this machine only", "upstream", redact.Parsed(u))
	}
}

// parseBaseURL checks an upstream base URL: http or https, with a host, without user info, query or
// fragment. keyEnv names the variable that carries the upstream's key instead. An error never shows what
// the URL held as user info or query.
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

// defaultAuditPath is the audit ring file when the config sets no audit.path. It lives with the instance's
// own local state: with a bbolt store, next to that file ("pg.db" -> "pg.audit.db", the --store bbolt:PATH
// when given, else --db); with an etcd store, next to the --store-snapshot file ("/data/snap.json" ->
// "/data/snap.audit.db"), or "promptgate.audit.db" in the working folder when there is none. --db plays no
// part with etcd: it names no file of the instance.
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

// auditPath is the default audit ring file: the DB path with ".audit" before its extension.
func auditPath(db string) string {
	ext := filepath.Ext(db)
	return strings.TrimSuffix(db, ext) + ".audit" + ext
}
