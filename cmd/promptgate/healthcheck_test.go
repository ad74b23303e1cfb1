package main

import (
	"errors"
	"flag"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// checkHealth runs `promptgate healthcheck args...` with the environment e and returns its exit
// code (as main would exit) and what it wrote.
func checkHealth(t *testing.T, e map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	out, errOut, err := runCmd(t, e, "", append([]string{"healthcheck"}, args...)...)
	if err != nil {
		code = exitCode(err)
		errOut += "promptgate: " + err.Error() + "\n" // what main prints
	}
	return code, out, errOut
}

// port is the port of a listener address.
func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// deadAddr is a loopback address nothing listens on: a port that was just free.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestHealthcheckAgainstServe asks a real serve, started in-process, at the addresses a container
// gives serve: its own, the wildcard 0.0.0.0 and the bare ":PORT", by flag and by environment.
func TestHealthcheckAgainstServe(t *testing.T) {
	s := startConsoleStack(t)
	addr := strings.TrimSuffix(strings.TrimPrefix(s.proxy, "http://"), "/v1")
	p := port(t, addr)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"flag", nil, []string{"--listen", addr}},
		{"wildcard", nil, []string{"--listen", "0.0.0.0:" + p}},
		{"bare port", nil, []string{"--listen", ":" + p}},
		{"environment", map[string]string{EnvListen: "0.0.0.0:" + p}, nil},
		{"the flag wins over the environment", map[string]string{EnvListen: deadAddr(t)}, []string{"--listen", addr}},
	} {
		code, out, errOut := checkHealth(t, tc.env, tc.args...)
		if code != 0 || !strings.Contains(out, "http://127.0.0.1:"+p+"/healthz answered 200") || errOut != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", tc.name, code, out, errOut)
		}
	}
}

// TestHealthcheckFailures: every way of not being healthy is exit 1 with one line on stderr that
// says what failed.
func TestHealthcheckFailures(t *testing.T) {
	t.Parallel()
	status := func(code int) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" || r.Method != http.MethodGet {
				http.Error(w, "wrong request", http.StatusTeapot)
				return
			}
			if code == http.StatusFound {
				http.Redirect(w, r, "/elsewhere", code)
				return
			}
			w.WriteHeader(code)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	unavailable, redirect := status(http.StatusServiceUnavailable), status(http.StatusFound)
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(release); slow.Close() })
	dead := deadAddr(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"nothing listens", nil, []string{"--listen", dead}, "GET http://" + dead + "/healthz: dial tcp " + dead},
		{"nothing listens at the address of the environment", map[string]string{EnvListen: dead}, nil, "GET http://" + dead + "/healthz: dial tcp"},
		{"an answer other than 200", nil, []string{"--listen", unavailable.Listener.Addr().String()}, "answered 503 Service Unavailable, want 200"},
		{"a redirect is not followed", nil, []string{"--listen", redirect.Listener.Addr().String()}, "answered 302 Found, want 200"},
		{"no answer in time", nil, []string{"--listen", slow.Listener.Addr().String(), "--timeout", "200ms"}, "no answer within 200ms"},
		{"no port", nil, []string{"--listen", "127.0.0.1"}, `--listen "127.0.0.1": use HOST:PORT`},
		{"port 0", nil, []string{"--listen", "127.0.0.1:0"}, "port 0 picks a new one"},
		{"a zero timeout", nil, []string{"--listen", dead, "--timeout", "0s"}, "want a positive duration"},
		{"an unknown flag", nil, []string{"--bogus"}, "flag provided but not defined: -bogus"},
		{"an argument", nil, []string{"--listen", dead, "extra"}, `takes no arguments, got ["extra"]`},
	} {
		code, out, errOut := checkHealth(t, tc.env, tc.args...)
		last := errOut[strings.LastIndex(strings.TrimSuffix(errOut, "\n"), "\n")+1:]
		if code != 1 || out != "" || !strings.HasPrefix(last, "promptgate: healthcheck: ") || !strings.Contains(last, tc.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and %q", tc.name, code, out, errOut, tc.want)
		}
	}
	if _, _, err := runCmd(t, nil, "", "healthcheck", "-h"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// TestHealthURL: the address asked for each form of --listen serve takes.
func TestHealthURL(t *testing.T) {
	t.Parallel()
	for listen, want := range map[string]string{
		"127.0.0.1:8787":       "http://127.0.0.1:8787/healthz",
		"0.0.0.0:8787":         "http://127.0.0.1:8787/healthz",
		":8787":                "http://127.0.0.1:8787/healthz",
		"[::]:8787":            "http://[::1]:8787/healthz",
		"[::1]:9000":           "http://[::1]:9000/healthz",
		"localhost:8787":       "http://localhost:8787/healthz",
		"pg.internal:8787":     "http://pg.internal:8787/healthz",
		"[0:0:0:0:0:0:0:0]:80": "http://[::1]:80/healthz",
	} {
		if got, err := healthURL(listen); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", listen, got, err, want)
		}
	}
}
