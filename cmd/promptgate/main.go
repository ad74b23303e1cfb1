// Command promptgate is the sidecar proxy for LLM traffic: `serve` runs it, `demo` runs it in front
// of a scripted model; `preview`, `migrate`, `templates`, `protocols`, `store`, `ca`, `healthcheck`
// and `version` are the operator's tools. main only wires: every command is a function of (ctx,
// args, stdout, stderr) so tests run them in-process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Version is promptgate's release.
const Version = "0.1.0"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "promptgate:", err)
		}
		os.Exit(exitCode(err))
	}
}

// usageError is a mistake in the command line (exit 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var u usageError
	if errors.As(err, &u) || errors.Is(err, flag.ErrHelp) {
		return 2
	}
	return 1
}

const usage = `promptgate — a sidecar proxy that layers prompts and enforces tool policy for LLM traffic

Usage:
  promptgate serve [flags]                     run the proxy
  promptgate demo [--listen ADDR] [--admin-listen ADDR]
                                               the proxy in front of a scripted model, with a demo
                                               protocol and commands to try (no key; nothing leaves the machine)
  promptgate preview [--protocol ID] [--header 'K: V']... [--path /v1/responses|/v1/messages] [FILE]
                                               print the preview report of a request (no upstream call)
  promptgate test [-v] [-run REGEXP] [--junit FILE] [DIR|FILE]...
                                               run the policy test cases (*.test.yaml) offline, through
                                               the proxy's own engine; exit 1 when a case fails
  promptgate test --record REQUEST_ID [--path P] [--out FILE] [--events FILE]
                                               write a case from the decisions the decision log keeps
  promptgate migrate up|down|status [--dir DIR]
  promptgate templates list|show|history|activate|rollback|push ...
  promptgate protocols list|show|history|activate|rollback|push|shadow|unshadow ...
                                               push FILE [--activate] stores a definition file as a new version;
                                               shadow NAME VERSION judges traffic with that version too, for the record
  promptgate policy suggest NAME [--since 24h] [--out FILE]
                                               propose a protocol version from what learn mode learned
  promptgate ca init [--out DIR] [--force]    write a CA for the HTTPS-proxy mode
  promptgate store copy --from SPEC --to SPEC [--force]
                                               copy every version, history, rollout and tool override
                                               between bbolt:PATH and etcd://HOST:PORT[,HOST:PORT]/PREFIX
  promptgate healthcheck [--listen ADDR] [--timeout D]
                                               exit 0 when the proxy listener's /healthz answers 200
                                               (a container's health check), else 1
  promptgate version

Run 'promptgate COMMAND -h' for a command's flags.
`

// commandUsage is what `promptgate COMMAND -h` prints for the commands that take a subcommand first
// ("" for the others).
func commandUsage(cmd string) string {
	switch cmd {
	case "migrate":
		return "Usage: promptgate migrate up|down|status [--dir DIR] [--db FILE [--create] | --store SPEC | --admin URL]\n" +
			"Run 'promptgate migrate up -h' for the flags.\n"
	case "templates":
		return "Usage: promptgate templates list | show NAME [--version N] | history NAME | activate NAME VERSION | rollback NAME\n" +
			"         | push FILE [--activate] [--note TEXT]\n" +
			"         [--db FILE [--create] | --store SPEC | --admin URL]\nRun 'promptgate templates list -h' for the flags.\n"
	case "protocols":
		return "Usage: promptgate protocols list | show ID [--version N] | history ID | activate ID VERSION | rollback ID\n" +
			"         | push FILE [--activate] [--note TEXT] | shadow ID VERSION | unshadow ID\n" +
			"         [--db FILE [--create] | --store SPEC | --admin URL]\nRun 'promptgate protocols list -h' for the flags.\n"
	case "ca":
		return "Usage: promptgate ca init [--out DIR] [--force]\nRun 'promptgate ca init -h' for the flags.\n"
	case "policy":
		return "Usage: promptgate policy suggest NAME [--since 24h] [--out FILE] [--report FILE] [--db FILE | --store SPEC | --admin URL]\n" +
			"Run 'promptgate policy suggest -h' for the flags.\n"
	case "store":
		return "Usage: promptgate store copy --from SPEC --to SPEC [--force]\nRun 'promptgate store copy -h' for the flags.\n"
	}
	return ""
}

// env reads an environment variable; tests pass their own.
type env func(string) string

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv env) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return usageError{"no command given"}
	}
	cmd, rest := args[0], args[1:]
	if u := commandUsage(cmd); u != "" && len(rest) > 0 && (rest[0] == "-h" || rest[0] == "--help" || rest[0] == "-help" || rest[0] == "help") {
		// `promptgate templates -h`: the subcommands; `promptgate templates show -h` lists a
		// subcommand's flags.
		fmt.Fprint(stdout, u)
		return nil
	}
	switch cmd {
	case "serve":
		return serve(ctx, rest, stdout, stderr, getenv)
	case "demo":
		return demoCmd(ctx, rest, stdout, stderr, getenv)
	case "preview":
		return preview(ctx, rest, stdin, stdout, stderr, getenv)
	case "migrate":
		return migrate(ctx, rest, stdout, stderr, getenv)
	case "templates", "protocols":
		return definitions(ctx, cmd, rest, stdout, stderr, getenv)
	case "ca":
		return ca(ctx, rest, stdout, stderr)
	case "store":
		return storeCmd(ctx, rest, stdout, stderr, getenv)
	case "policy":
		return policyCmd(ctx, rest, stdout, stderr, getenv)
	case "healthcheck":
		return healthcheck(ctx, rest, stdout, stderr, getenv)
	case "test":
		return testCmd(ctx, rest, stdout, stderr, getenv)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "promptgate %s\n", Version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return usageError{fmt.Sprintf("unknown command %q", cmd)}
}
