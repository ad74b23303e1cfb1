package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/demo"
	"github.com/promptgate/promptgate/store"
)

// demoCmd runs `promptgate demo`: the scripted model (proxy/demo) on loopback, and serve in front
// of it with the demo protocol as the default, in a DB of its own that is removed when it stops;
// then it prints commands to try it. No key is needed and nothing leaves the machine.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	listen := fs.String("listen", orEnv(getenv, EnvListen, DefaultListen), "the proxy listener; clients use base URL http://ADDR/v1 (env "+EnvListen+")")
	adminListen := fs.String("admin-listen", orEnv(getenv, EnvAdminListen, DefaultAdminListen), "admin listener; a non-loopback address needs "+EnvAdminToken+" (env "+EnvAdminListen+")")
	pos, err := parseFlags(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("demo takes no arguments, got %q", pos)}
	}
	dir, err := os.MkdirTemp("", "promptgate-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	db, cfg := filepath.Join(dir, "demo.db"), filepath.Join(dir, "demo.yaml")
	if err := seedDemo(ctx, db, cfg); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo: the model's listener: %w", err)
	}
	model := &http.Server{Handler: demo.Handler(demo.Options{}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = model.Serve(ln) }()
	defer model.Close()
	up := "http://" + ln.Addr().String() + "/v1"
	denv := demoEnv(getenv)
	f, err := parseServeFlags([]string{"--listen", *listen, "--admin-listen", *adminListen, "--upstream", up,
		"--anthropic-upstream", up, "--gemini-upstream", "http://" + ln.Addr().String(), "--db", db, "--config", cfg}, stderr, denv)
	if err != nil {
		return err
	}
	return serveWith(ctx, f, stdout, stderr, denv, func(p, a net.Addr) {
		_, _ = io.WriteString(stdout, demoText(p.String(), a.String()))
	})
}

// seedDemo creates the demo's DB with the demo protocol active, and its config, which makes that
// protocol the default.
func seedDemo(ctx context.Context, db, cfg string) error {
	st, err := openStore(db, false, nil)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	v, err := st.AddVersion(ctx, store.KindProtocol, demo.Protocol(), "demo", "the demo protocol")
	if err == nil {
		_, err = st.Activate(ctx, store.KindProtocol, demo.ProtocolID, v)
	}
	err = errors.Join(err, st.Close())
	if err != nil {
		return fmt.Errorf("demo: the demo protocol: %w", err)
	}
	if err := os.WriteFile(cfg, []byte("defaultProtocol: "+demo.ProtocolID+"\n"), 0o600); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

// demoEnv is the environment the demo's serve sees: what would send anything off the machine
// (upstream keys, tracing) or name another store, config or listener is left out.
func demoEnv(getenv env) env {
	return func(k string) string {
		switch k {
		case EnvUpstream, EnvAnthropicUpstream, EnvGeminiUpstream, EnvUpstreamKey, EnvAnthropicKey, EnvGeminiKey, EnvDB,
			EnvStore, EnvStoreSnapshot, EnvConfig, EnvProxyListen, EnvMCPListen:
			return ""
		}
		if strings.HasPrefix(k, "OTEL_") {
			return ""
		}
		return getenv(k)
	}
}

// demoConfirmPlaceholder stands for the code in the printed command that confirms a held call.
const demoConfirmPlaceholder = "CODE"

// demoCommand is one command the demo prints: what it shows (comment lines) and the curl command.
type demoCommand struct {
	comment string
	curl    string
}

// demoCommands are the commands to try the demo whose proxy listens on addr.
func demoCommands(addr string) []demoCommand {
	ex := map[string]demo.Example{}
	for _, e := range demo.Examples() {
		ex[e.Name] = e
	}
	curl := func(flags, name string, headers ...string) string {
		e := ex[name]
		var b strings.Builder
		fmt.Fprintf(&b, "curl %s http://%s%s -H 'Content-Type: application/json'", flags, addr, e.Path)
		for _, h := range headers {
			fmt.Fprintf(&b, " -H '%s'", h)
		}
		fmt.Fprintf(&b, " \\\n  -d '%s'\n", strings.TrimSpace(string(e.Body)))
		return b.String()
	}
	return []demoCommand{
		{"# 1. The layered system prompt. The model answers with the system prompt promptgate built for it: the\n" +
			"#    protocol's rules, the app's instructions, the request's context fenced as one line of untrusted\n" +
			"#    JSON (its fake header cannot start a line), the allowed tools. run_shell is not in the protocol's\n" +
			"#    allowlist: the model never sees it (X-Promptgate-Tools-Removed: run_shell).\n",
			curl("-si", demo.ExampleLayered)},
		{"# 2. A tool call blocked mid-stream. A fetched page tells the model to mail a link to another site; its\n" +
			"#    text streams at once, its send_email call is held back, vetted and replaced by a notice (rule\n" +
			"#    mail-links: links in mail go to acme.com only). No byte of the call reaches the client.\n",
			curl("-sN", demo.ExampleBlockedStream)},
		{"# 3. A call held for confirmation (Anthropic Messages). An invoice names a new IBAN and the model pays it;\n" +
			"#    rule new-payee holds the payment (payees come from the user or the payee list) and the answer\n" +
			"#    shows the IBAN, the amount and a code such as 7KQM-3XPA.\n",
			curl("-s", demo.ExampleHeld, "anthropic-version: 2023-06-01")},
		{"#    To confirm, send the same request with the code in place of " + demoConfirmPlaceholder + " (an app's button sends this\n" +
			"#    header; a user can type the code in the next message instead). The payment is released once.\n",
			curl("-s", demo.ExampleHeld, "anthropic-version: 2023-06-01", proxy.HeaderConfirm+": "+demoConfirmPlaceholder)},
	}
}

// demoText is what the demo prints once it listens: how it works and the commands to try.
func demoText(addr, admin string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\npromptgate demo: the proxy talks to a scripted model on this machine (no key; nothing leaves it), under\n"+
		"the protocol %q (tool rules and information-flow rules: curl -s http://%s/admin/protocols/%s/versions/1).\n"+
		"The model calls a tool when a message or a tool result says call NAME {JSON arguments}; otherwise it\n"+
		"answers with the system prompt it received. Paste these in another terminal:\n\n", demo.ProtocolID, admin, demo.ProtocolID)
	for _, c := range demoCommands(addr) {
		b.WriteString(c.comment)
		b.WriteString(c.curl)
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Decisions: http://%s/console/ (or curl -s 'http://%s/admin/audit?limit=5'). Ctrl-C stops the demo.\n", admin, admin)
	return b.String()
}
