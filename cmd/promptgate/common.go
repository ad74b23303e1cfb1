package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/proxy/mcpjoin"
	"github.com/promptgate/promptgate/proxy/telemetry/tracing"
	"github.com/promptgate/promptgate/store"
)

// Environment variables of the flags; a flag given on the command line wins.
const (
	EnvListen            = "PROMPTGATE_LISTEN"
	EnvUpstream          = "PROMPTGATE_UPSTREAM"
	EnvDB                = "PROMPTGATE_DB"
	EnvConfig            = "PROMPTGATE_CONFIG"
	EnvAdminListen       = "PROMPTGATE_ADMIN_LISTEN"
	EnvAdminToken        = "PROMPTGATE_ADMIN_TOKEN"
	EnvProxyListen       = "PROMPTGATE_PROXY_LISTEN"
	EnvProxyToken        = "PROMPTGATE_PROXY_TOKEN"
	EnvMCPListen         = "PROMPTGATE_MCP_LISTEN"
	EnvMCPToken          = "PROMPTGATE_MCP_TOKEN"
	EnvAnthropicUpstream = "PROMPTGATE_ANTHROPIC_UPSTREAM"
	EnvUpstreamKey       = "PROMPTGATE_UPSTREAM_API_KEY"
	EnvAnthropicKey      = "PROMPTGATE_ANTHROPIC_API_KEY"
	EnvGeminiUpstream    = "PROMPTGATE_GEMINI_UPSTREAM"
	EnvGeminiKey         = "PROMPTGATE_GEMINI_API_KEY"
	EnvLogLevel          = "PROMPTGATE_LOG_LEVEL"
	// EnvConfirmKey is the HMAC key of the confirmation codes of held calls (at least 32 bytes);
	// every instance that must accept another's codes needs the same. Unset, each start takes a
	// random one.
	EnvConfirmKey = "PROMPTGATE_CONFIRM_KEY"
)

// Defaults of the flags.
const (
	DefaultListen            = "127.0.0.1:8787"
	DefaultUpstream          = "https://api.openai.com/v1"
	DefaultDB                = "promptgate.db"
	DefaultAdminListen       = "127.0.0.1:8788"
	DefaultAnthropicUpstream = "https://api.anthropic.com/v1"
	DefaultGeminiUpstream    = "https://generativelanguage.googleapis.com"
)

// orEnv is the flag default: the environment variable when set, else def.
func orEnv(getenv env, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// storeFlags are the flags every DB-reading command takes.
type storeFlags struct {
	db, config, store string
	// create lets a command other than serve create a new DB file (--create); see checkNewDB.
	create bool
}

func addStoreFlags(fs *flag.FlagSet, getenv env) *storeFlags {
	f := &storeFlags{}
	fs.StringVar(&f.db, "db", orEnv(getenv, EnvDB, DefaultDB), "bbolt file with templates and protocols (env "+EnvDB+"); serve creates and seeds it on first start")
	fs.StringVar(&f.store, "store", getenv(EnvStore), "where the definitions live: bbolt:PATH (default: the --db file) or etcd://HOST:PORT[,HOST:PORT]/PREFIX for a fleet (env "+EnvStore+")")
	fs.StringVar(&f.config, "config", getenv(EnvConfig), "deployment YAML: routes, tool policy, plugins, limits (env "+EnvConfig+")")
	return f
}

// addCLIStoreFlags are the store flags of the commands other than serve: they open an existing DB
// file, and create one only when told (--create).
func addCLIStoreFlags(fs *flag.FlagSet, getenv env) *storeFlags {
	f := addStoreFlags(fs, getenv)
	fs.BoolVar(&f.create, "create", false, "create and seed the DB file when it does not exist (without it, a missing file is an error)")
	return f
}

// errNoDB is a DB file that a command other than serve would have created.
var errNoDB = errors.New("no such DB")

// checkNewDB refuses a bbolt store whose file does not exist unless --create was given, naming the
// path and where it came from: a command run from another folder would otherwise work on a new,
// empty DB and not on the server's. created reports that the file is about to be created.
func checkNewDB(sf *storeFlags, getenv env) (created bool, err error) {
	spec, err := parseStoreSpec("--store", sf.store, sf.db)
	if err != nil || spec.etcd() {
		return false, err
	}
	if _, err := os.Stat(spec.boltPath); !errors.Is(err, os.ErrNotExist) {
		return false, nil // there, or unreadable: opening it says what is wrong
	}
	if sf.create {
		return true, nil
	}
	from := "--db"
	switch {
	case sf.store != "":
		from = "--store"
	case sf.db == DefaultDB && getenv(EnvDB) == "":
		from = "the default --db, in the working folder"
	case sf.db == getenv(EnvDB):
		from = EnvDB
	}
	return false, fmt.Errorf("%w: %s (%s) does not exist: give --db the DB your server uses (or --admin the URL of its admin API), or --create to create a new DB there, seeded with the built-in definitions",
		errNoDB, absPath(spec.boltPath), from)
}

// absPath is p made absolute for messages (p itself when that fails).
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// sayStore tells on stderr which store a command uses: the file (absolute) or the etcd prefix.
func sayStore(stderr io.Writer, sf *storeFlags, created bool) {
	name := storeName(sf)
	if spec, err := parseStoreSpec("--store", sf.store, sf.db); err == nil && !spec.etcd() {
		name = "bbolt:" + absPath(spec.boltPath)
	}
	if created {
		fmt.Fprintf(stderr, "promptgate: created %s, seeded with the built-in definitions (--create)\n", name)
		return
	}
	fmt.Fprintf(stderr, "promptgate: using %s\n", name)
}

// parseFlags parses args, flags and positional arguments in any order ("--" ends the flags), and
// returns the positional arguments. It prints the flags to stderr on error.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	fs.SetOutput(stderr)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// openStore opens the bbolt file with the validation hook.
func openStore(path string, readOnly bool, log *slog.Logger) (*store.Bolt, error) {
	return store.Open(path, store.Options{Logger: log, Validate: proxy.ValidateDefinition, Links: proxy.CheckLinks, ReadOnly: readOnly})
}

// newLogger writes JSON lines to stderr at the level of PROMPTGATE_LOG_LEVEL
// (debug|info|warn|error).
func newLogger(stderr io.Writer, getenv env) (*slog.Logger, error) {
	var level slog.Level
	if v := getenv(EnvLogLevel); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return nil, fmt.Errorf("%s=%q: use debug, info, warn or error", EnvLogLevel, v)
		}
	}
	return slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})), nil
}

// pipeline is what serve and preview share: the config, the definitions and the engine.
type pipeline struct {
	cfg *config.File
	// settings are the prompt settings of the engine: the PROMPT_* environment, the config's
	// security.
	settings assembly.Settings
	store    store.Store
	defs     *proxy.Definitions
	engine   *proxy.Engine
	host     *plugins.Host // nil without plugins
	// calls joins the model's calls to the MCP door's; nil when the config names no MCP server.
	calls *mcpjoin.Record
}

// pluginStatus reports the context sources (none without plugins).
func (p *pipeline) pluginStatus() []plugins.SourceStatus {
	if p.host == nil {
		return nil
	}
	return p.host.Status()
}

func (p *pipeline) Close() {
	if p.host != nil {
		_ = p.host.Close()
	}
	if p.defs != nil {
		p.defs.Close()
	}
	if p.store != nil {
		_ = p.store.Close()
	}
}

// openPipeline loads the config and the env settings, opens the DB and builds the engine.
func openPipeline(ctx context.Context, sf *storeFlags, readOnly bool, getenv env, log *slog.Logger) (*pipeline, error) {
	return openPipelineSnapshot(ctx, sf, readOnly, getenv, log, "")
}

// openPipelineSnapshot is openPipeline with the local snapshot file of an etcd store (serve).
func openPipelineSnapshot(ctx context.Context, sf *storeFlags, readOnly bool, getenv env, log *slog.Logger, snapshot string) (*pipeline, error) {
	cfg, err := config.Load(sf.config)
	if err != nil {
		return nil, err
	}
	settings, err := assembly.SettingsFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	cfg.Security.Apply(&settings)
	p := &pipeline{cfg: cfg, settings: settings}
	if p.store, err = openStoreFlags(ctx, sf, readOnly, getenv, log, snapshot); err != nil {
		return nil, err
	}
	if p.defs, err = proxy.NewDefinitions(ctx, p.store, log); err != nil {
		p.Close()
		return nil, err
	}
	if err := p.defs.CheckProtocols(cfg.Policy()); err != nil {
		p.Close()
		name := sf.config
		if name == "" {
			name = "(none given: the defaults)"
		}
		return nil, fmt.Errorf("config %s: %w", name, err)
	}
	var src proxy.ContextSource
	if len(cfg.Plugins) > 0 {
		if p.host, err = plugins.NewHost(ctx, cfg.Plugins, plugins.HostOptions{Logger: log, Trace: sourceSpan}); err != nil {
			p.Close()
			return nil, err
		}
		src = p.host
	}
	if len(cfg.MCP.Servers) > 0 {
		p.calls = mcpjoin.New(0, cfg.MCP.JoinWindow, nil)
	}
	if p.engine, err = proxy.NewEngine(proxy.EngineOptions{
		Defs: p.defs, Policy: cfg.Policy(), Settings: settings, Limits: cfg.Limits, Context: src, Log: log, Calls: p.calls,
	}); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// parseHeader reads "K: V".
func parseHeader(s string) (string, string, error) {
	k, v, ok := strings.Cut(s, ":")
	k = strings.TrimSpace(k)
	if !ok || k == "" || strings.ContainsAny(k, " \t") {
		return "", "", usageError{fmt.Sprintf("--header %q: use 'Name: value'", s)}
	}
	return k, strings.TrimSpace(v), nil
}

// headerList is a repeatable --header flag.
type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ", ") }
func (h *headerList) Set(s string) error { *h = append(*h, s); return nil }

// sourceSpan opens the span of one context source's call in a traced request, for the plugin host.
func sourceSpan(ctx context.Context) (context.Context, plugins.SourceSpan) {
	ctx, sp := tracing.Stage(ctx, tracing.SpanContextSource)
	if sp == nil {
		return ctx, nil // no span: a nil *Span must not become a non-nil SourceSpan
	}
	return ctx, sp
}
