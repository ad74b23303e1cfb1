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
	"time"

	"github.com/promptgate/promptgate/proxy"
)

// DefaultHealthTimeout bounds the whole health check: connecting, asking and reading the answer.
const DefaultHealthTimeout = 2 * time.Second

// healthcheck runs `promptgate healthcheck [--listen ADDR] [--timeout D]`: it asks GET /healthz of
// the proxy listener at the address serve would use and returns nil only for a 200. It is a
// container's health check (a distroless image has no shell and no curl), so every failure, a bad
// flag included, is exit 1.
func healthcheck(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env) error {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	listen := fs.String("listen", orEnv(getenv, EnvListen, DefaultListen), "the proxy listener's address, as serve takes it (env "+EnvListen+")")
	timeout := fs.Duration("timeout", DefaultHealthTimeout, "how long to wait for the answer")
	pos, err := parseFlags(fs, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	if err != nil {
		return fmt.Errorf("healthcheck: %s", err.Error())
	}
	if len(pos) > 0 {
		return fmt.Errorf("healthcheck: takes no arguments, got %q", pos)
	}
	if *timeout <= 0 {
		return fmt.Errorf("healthcheck: --timeout %v: want a positive duration, e.g. 2s", *timeout)
	}
	u, err := healthURL(*listen)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	if err := askHealth(ctx, u, *timeout); err != nil {
		return fmt.Errorf("healthcheck: GET %s: %w", u, err)
	}
	fmt.Fprintf(stdout, "healthy: GET %s answered 200\n", u)
	return nil
}

// healthURL is the /healthz URL of a listener bound to listen. A wildcard or empty host (0.0.0.0,
// ::, ":PORT") is asked on loopback of the same family: the check runs beside the server, in its
// container.
func healthURL(listen string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--listen %q: use HOST:PORT as serve takes it, e.g. %s", listen, DefaultListen)
	}
	if port == "" || port == "0" {
		return "", fmt.Errorf("--listen %q: needs the port serve listens on (port 0 picks a new one at every start)", listen)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return "http://" + net.JoinHostPort(host, port) + proxy.PathHealthz, nil
}

// askHealth sends one GET to u with its own client: no proxy from the environment (HTTP_PROXY must
// not answer for the server), no redirect followed, the whole exchange within timeout.
func askHealth(ctx context.Context, u string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	client := &http.Client{
		Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return fmt.Errorf("no answer within %v", timeout)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err // its message repeats the method and URL, which the caller names
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s, want 200", resp.Status)
	}
	return nil
}
