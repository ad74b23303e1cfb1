package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/promptgate/promptgate/proxy"
)

// serveFlags are the flags of `promptgate serve`.
type serveFlags struct {
	listen, upstream, adminListen, proxyListen, anthropicUpstream string
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
	if _, err := parseBaseURL("--anthropic-upstream", f.anthropicUpstream); err != nil {
		return err
	}
	if err := checkAdminListen(f.adminListen, getenv(EnvAdminToken)); err != nil {
		return err
	}
	log, err := newLogger(stderr, getenv)
	if err != nil {
		return err
	}

	p, err := openPipeline(ctx, f.store, false, getenv, log)
	if err != nil {
		return err
	}
	defer p.Close()

	var ready atomic.Bool
	srv, err := proxy.New(proxy.Options{
		Engine:         p.engine,
		Upstream:       upstream,
		UpstreamAPIKey: getenv(EnvUpstreamKey),
		Log:            log,
		Ready: func() (bool, string) {
			if !ready.Load() {
				return false, "starting"
			}
			return true, ""
		},
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", f.listen, err)
	}
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          nil,
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	ready.Store(true)
	log.Info("promptgate serving", "version", Version, "listen", ln.Addr().String(), "upstream", upstream.String(), "db", f.store.db)
	fmt.Fprintf(stdout, "promptgate %s listening on http://%s/v1 (upstream %s)\n", Version, ln.Addr(), upstream)

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing requests in flight")
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
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
