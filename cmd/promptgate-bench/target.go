package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
	"github.com/promptgate/promptgate/proxy/toolseen"
	"github.com/promptgate/promptgate/store"
)

// benchProtocol is the protocol every promptgate request of the run gets (the config's default):
// the layered template, rules and directives, tool filtering (create_note denied), and argument
// rules plus the declared schemas for the calls of the stream.
const benchProtocol = `{
  "id": "bench",
  "description": "promptgate-bench: the full pipeline",
  "promptTemplate": {"base": "base_tool_call_v2", "overrides": {"rules": "- Answer briefly and cite ticket ids.\n- Never guess a ticket id; read the ticket."}},
  "scope": ["prompt_modules:standard"],
  "allowClientSelection": false,
  "clientSystem": "keep",
  "directives": ["Prefer the ticket tools.", "Quote numbers exactly."],
  "tools": {"allow": ["search_docs", "get_ticket", "create_note"], "deny": ["create_note"]},
  "toolCalls": {"onViolation": "refuse", "rules": [
    {"id": "ticket-id", "tool": "get_ticket", "path": "id", "pattern": "^T-[0-9]{1,8}$"},
    {"id": "limit", "tool": "search_docs", "path": "limit", "min": 1, "max": 20, "optional": true}
  ]}
}`

// benchBudgets is PROMPT_RUNTIME_CONTEXT_BUDGETS_JSON of the run: per-field budgets are on.
const benchBudgets = `{"request.attachments": 0.5, "memory": 2000}`

// benchConfig is the deployment YAML of the run, before the plugin entries.
const benchConfig = `defaultProtocol: bench
tools:
  get_ticket: {allowedProtocols: [bench]}
  search_docs: {enabled: true}
`

// pipeline is promptgate's engine wired as `promptgate serve` wires it (openPipeline in
// cmd/promptgate/common.go): config file, env settings, bbolt store with the validation hook,
// definitions, engine. The only additions are a rollout that stores the bench protocol (what
// `promptgate migrate up` would do) and, with plugins, the context-source host.
type pipeline struct {
	engine *proxy.Engine
	// settings are the engine's assembly settings.
	settings assembly.Settings
	defs     *proxy.Definitions
	ready    func() (bool, string)
	log      *slog.Logger
	closers  []func()
}

// Close releases everything, in the reverse order of opening.
func (p *pipeline) Close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
}

// openPipeline builds the engine in dir (its DB, config and log) with nPlugins context-source
// plugins.
func openPipeline(ctx context.Context, dir string, nPlugins int) (_ *pipeline, err error) {
	p := &pipeline{ready: func() (bool, string) { return true, "" }}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	logFile, err := os.Create(filepath.Join(dir, "promptgate.log"))
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, func() { _ = logFile.Close() })
	// serve logs JSON lines at info to stderr; here they go to a file of the run.
	p.log = slog.New(slog.NewJSONHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))

	cfgYAML := benchConfig
	if nPlugins > 0 {
		entries, err := pluginEntries(nPlugins)
		if err != nil {
			return nil, err
		}
		cfgYAML += entries
	}
	cfgPath := filepath.Join(dir, "promptgate.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfgYAML), 0o600); err != nil {
		return nil, err
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	settings, err := assembly.SettingsFromEnv(func(k string) string {
		if k == assembly.EnvContextBudgets {
			return benchBudgets
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	st, err := store.Open(filepath.Join(dir, "promptgate.db"), store.Options{Logger: p.log, Validate: proxy.ValidateDefinition, Links: proxy.CheckLinks})
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, func() { _ = st.Close() })
	if err := st.ApplyRollout(ctx, store.Rollout{ID: "bench-1", Protocols: []json.RawMessage{json.RawMessage(benchProtocol)}}); err != nil {
		return nil, fmt.Errorf("store the bench protocol: %w", err)
	}
	if p.defs, err = proxy.NewDefinitions(ctx, st, p.log); err != nil {
		return nil, err
	}
	p.closers = append(p.closers, p.defs.Close)
	var src proxy.ContextSource
	if len(cfg.Plugins) > 0 {
		h, err := startPlugins(ctx, cfg.Plugins, p.log)
		if err != nil {
			return nil, err
		}
		p.closers = append(p.closers, func() { _ = h.Close() })
		src, p.ready = h, h.Ready
	}
	p.settings = settings
	if p.engine, err = proxy.NewEngine(proxy.EngineOptions{
		Defs: p.defs, Policy: cfg.Policy(), Settings: settings, Limits: cfg.Limits, Context: src, Log: p.log,
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// newPromptgate is the handler of serve's proxy listener on the pipeline, as serve builds it:
// metrics, the audit recorders (the log's queue, metrics and the audit ring file), the memory of
// tools seen and proxy.New, with tr as the upstream transport.
func newPromptgate(ctx context.Context, dir, upstream string, nPlugins int, tr http.RoundTripper) (http.Handler, *pipeline, error) {
	return newPromptgateAudit(ctx, dir, upstream, nPlugins, tr, true)
}

// newPromptgateAudit is newPromptgate; with queued false, the decisions are logged on the request's
// goroutine instead (no log queue, no audit ring): what a request allocates is then its own alone,
// not a writer goroutine's whose batches follow the clock (the allocation budgets count it so).
func newPromptgateAudit(ctx context.Context, dir, upstream string, nPlugins int, tr http.RoundTripper, queued bool) (http.Handler, *pipeline, error) {
	p, err := openPipeline(ctx, dir, nPlugins)
	if err != nil {
		return nil, nil, err
	}
	m := metrics.New(p.defs.Versions)
	u, err := url.Parse(strings.TrimRight(upstream, "/") + "/v1")
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	rec := audit.Multi{audit.Log{Logger: p.log}, m}
	if queued {
		ring, err := audit.OpenRing(filepath.Join(dir, "audit.db"), audit.DefaultRingSize, p.log)
		if err != nil {
			p.Close()
			return nil, nil, err
		}
		p.closers = append(p.closers, func() { _ = ring.Close() })
		m.AuditSink("ring", ring.Stats)
		decisions := audit.NewLogQueue(audit.Log{Logger: p.log}, audit.Options{})
		p.closers = append(p.closers, func() { _ = decisions.Close() })
		rec = audit.Multi{decisions, m, ring}
	}
	srv, err := proxy.New(proxy.Options{
		Engine:    p.engine,
		Upstreams: map[string]proxy.Upstream{"openai": {URL: u}, "anthropic": {URL: u}},
		Transport: tr,
		Audit:     rec,
		Tools:     toolseen.New(0),
		Metrics:   m,
		Log:       p.log,
		Ready:     p.ready,
	})
	if err != nil {
		p.Close()
		return nil, nil, err
	}
	return srv, p, nil
}
