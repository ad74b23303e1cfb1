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
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/admin"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/proxy/metrics"
	"github.com/promptgate/promptgate/proxy/mitm"
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
	upstream, err := parseBaseURL("--upstream", f.upstream)
	if err != nil {
		return err
	}
	anthropicUpstream, err := parseBaseURL("--anthropic-upstream", f.anthropicUpstream)
	if err != nil {
		return err
	}
	if err := checkAdminListen(f.adminListen, getenv(EnvAdminToken)); err != nil {
		return err
	}
	log, err := newLogger(stderr, getenv)
	if err != nil {
		return err
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
	recorder := audit.Multi{audit.Log{Logger: log}, m, ring}
	if p.cfg.Audit.File != "" {
		jl, err := audit.OpenJSONL(p.cfg.Audit.File, log)
		if err != nil {
			return err
		}
		defer jl.Close()
		m.AuditSink("file", jl.Stats)
		recorder = append(recorder, jl)
	}
	seen := toolseen.New(0)
	base := proxy.Options{
		Engine:          p.engine,
		Tools:           seen,
		UpstreamAPIKey:  getenv(EnvUpstreamKey),
		AnthropicAPIKey: getenv(EnvAnthropicKey),
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
	var door *mitm.Door
	if f.proxyListen != "" {
		if door, err = newDoor(p.cfg, base, log); err != nil {
			return err
		}
	}
	var servers []*http.Server
	errc := make(chan error, 3)
	start := func(name, addr string, h http.Handler) (net.Addr, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("%s: listen %s: %w", name, addr, err)
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
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

	addr, err := start("proxy listener", f.listen, srv)
	if err != nil {
		return err
	}
	// The lines on stdout are printed once every listener is up and /readyz answers 200, so whoever
	// waits for them (a supervisor, a test) can send traffic at once.
	lines := []string{fmt.Sprintf("promptgate %s listening on http://%s/v1 (upstream %s)", Version, addr, upstream)}
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
	aaddr, err := start("admin listener", f.adminListen, adminHandler)
	if err != nil {
		return err
	}
	log.Info("admin API", "listen", aaddr.String(), "token", getenv(EnvAdminToken) != "")
	lines = append(lines, fmt.Sprintf("promptgate admin API on http://%s (console: http://%s%s)", aaddr, aaddr, admin.PathConsole))
	if door != nil {
		daddr, err := start("HTTPS-proxy listener", f.proxyListen, door)
		if err != nil {
			return err
		}
		log.Info("HTTPS-proxy door open", "listen", daddr.String(), "intercepted_hosts", p.cfg.MITM.Hosts, "passthrough", *p.cfg.MITM.Passthrough)
		lines = append(lines, fmt.Sprintf("promptgate HTTPS-proxy door on %s (HTTPS_PROXY=http://%s)", daddr, daddr))
	} else if p.cfg.MITM != nil {
		// The config asks for interception but no door is open: say so rather than ignore the key.
		log.Warn("config has mitm: but the HTTPS-proxy door is off; give --proxy-listen (or " + EnvProxyListen + ") to open it")
	}
	ready.Store(true)
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	log.Info("promptgate serving", "version", Version, "listen", addr.String(), "upstream", upstream.String(), "store", storeName(f.store))

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing requests in flight")
	return nil
}

// newDoor builds the HTTPS-proxy door from the config's mitm section; intercepted origins run the same
// pipeline as the base-URL listener, with the origin the client asked for as the upstream.
func newDoor(cfg *config.File, base proxy.Options, log *slog.Logger) (*mitm.Door, error) {
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
	return mitm.New(mitm.Options{
		CA: ca, Hosts: cfg.MITM.Hosts, Passthrough: *cfg.MITM.Passthrough, Log: log,
		Handler: func(scheme, hostport string) (http.Handler, error) {
			o := base
			o.Upstream = &url.URL{Scheme: scheme, Host: hostport, Path: "/v1"}
			o.AnthropicUpstream = &url.URL{Scheme: scheme, Host: hostport, Path: "/v1"}
			tr := proxy.NewTransport()
			tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
			o.Transport = tr
			return proxy.New(o)
		},
	})
}

// parseBaseURL checks an upstream base URL: http or https, with a host.
func parseBaseURL(flagName, s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Sprintf("%s %q: give a base URL such as https://api.openai.com/v1", flagName, s)}
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, usageError{fmt.Sprintf("%s %q: a base URL has no query or fragment", flagName, s)}
	}
	return u, nil
}

// checkAdminListen refuses a non-loopback admin address unless a token is set.
func checkAdminListen(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return usageError{fmt.Sprintf("--admin-listen %q: use HOST:PORT, e.g. %s", addr, DefaultAdminListen)}
	}
	if token != "" {
		return nil
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return usageError{fmt.Sprintf("--admin-listen %q is not a loopback address: set %s to expose the admin API beyond this machine", addr, EnvAdminToken)}
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
