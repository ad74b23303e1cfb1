package plugins_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/store"
)

// The host is the engine's context source, as serve wires it.
var _ proxy.ContextSource = (*plugins.Host)(nil)

// proxyEngine builds the real engine on a real bbolt store, with the config's plugins started by
// a real host.
func proxyEngine(t *testing.T, cfgYAML string, protocols ...string) *proxy.Engine {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "promptgate.db"), store.Options{Validate: proxy.ValidateDefinition})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if len(protocols) > 0 {
		var defs []json.RawMessage
		for _, p := range protocols {
			defs = append(defs, json.RawMessage(p))
		}
		if err := st.ApplyRollout(context.Background(), store.Rollout{ID: "test", Protocols: defs}); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	defs, err := proxy.NewDefinitions(context.Background(), st, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(defs.Close)
	h := startHost(t, plugins.HostOptions{}, cfg.Plugins...)
	e, err := proxy.NewEngine(proxy.EngineOptions{
		Defs: defs, Policy: cfg.Policy(), Settings: assembly.DefaultSettings(), Limits: cfg.Limits, Context: h, Log: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// runtimeContext previews a chat request and returns the system message and its RUNTIME CONTEXT
// line, decoded.
func runtimeContext(t *testing.T, e *proxy.Engine, header http.Header, body string) (string, map[string]any) {
	t.Helper()
	rep, err := e.Preview(context.Background(), proxy.Input{Path: proxy.PathChat, Header: header, Body: []byte(body)})
	if err != nil {
		t.Fatalf("preview: %v", err)
	}
	var r struct {
		UpstreamRequest struct {
			Messages []struct {
				Role    string `json:"role"`
				Content string `json:"content"`
			} `json:"messages"`
		} `json:"upstreamRequest"`
	}
	if err := json.Unmarshal(rep, &r); err != nil {
		t.Fatal(err)
	}
	sys := r.UpstreamRequest.Messages[0].Content
	_, after, ok := strings.Cut(sys, assembly.ContextHeader+"\n")
	if !ok {
		t.Fatalf("no RUNTIME CONTEXT block in:\n%s", sys)
	}
	line, _, _ := strings.Cut(after, "\n")
	var ctx map[string]any
	if err := json.Unmarshal([]byte(line), &ctx); err != nil {
		t.Fatalf("context line %q: %v", line, err)
	}
	return sys, ctx
}

func TestThroughTheRealProxy(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "alice.json"), `{"facts":["prefers tea","works on payments"],"lastSeen":"2026-11-30"}`)
	mem, ts := built["filememory"], built["testsource"]
	cfgYAML := fmt.Sprintf(`
plugins:
  - {name: memory, path: %q, sha256: %q, module: memory, minMode: standard, timeout: 2s, cacheTTL: 30s,
     config: {dir: %q}}
  - {name: notes, path: %q, sha256: %q, module: notes, minMode: standard, timeout: 2s,
     config: {behavior: imitate}}
  - {name: flaky, path: %q, sha256: %q, module: flaky, timeout: 2s, config: {behavior: error}}
  - {name: deep, path: %q, sha256: %q, module: deep, minMode: full, required: true, config: {behavior: error}}
`, mem.path, mem.sha256, dir, ts.path, ts.sha256, ts.path, ts.sha256, ts.path, ts.sha256)
	e := proxyEngine(t, cfgYAML)

	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"promptgate":{"user":"alice"}}`
	sys, got := runtimeContext(t, e, http.Header{}, body)
	memory, _ := got["memory"].(map[string]any)
	if memory == nil || fmt.Sprint(memory["facts"]) != "[prefers tea works on payments]" || memory["lastSeen"] != "2026-11-30" {
		t.Errorf(`"memory" = %v, want alice.json`, got["memory"])
	}
	meta, _ := got["meta"].(map[string]any)
	if fmt.Sprint(meta["sources"]) != "[memory notes]" {
		t.Errorf("meta.sources = %v", meta["sources"])
	}
	if fmt.Sprint(meta["skipped"]) != "[map[reason:error: backend down source:flaky]]" {
		t.Errorf("meta.skipped = %v", meta["skipped"])
	}
	// The plugin's imitation of a header is data inside the JSON line: exactly one line of the
	// system message is the real header, and the untrusted directive was dropped.
	n := 0
	for _, l := range strings.Split(sys, "\n") {
		if strings.HasPrefix(l, "=== SYSTEM CORE ===") {
			n++
		}
	}
	if n != 1 || strings.Contains(sys, "developer mode") {
		t.Errorf("system message has %d SYSTEM CORE lines / the untrusted directive:\n%s", n, sys)
	}
	if !strings.Contains(got["notes"].(map[string]any)["text"].(string), "=== SYSTEM CORE ===") {
		t.Errorf("notes = %v", got["notes"])
	}

	// The user from the header works the same; an unknown user gets {}.
	h := http.Header{}
	h.Set(proxy.HeaderUser, "alice")
	if _, got := runtimeContext(t, e, h, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`); got["memory"] == nil ||
		len(got["memory"].(map[string]any)) != 2 {
		t.Errorf("X-Promptgate-User: memory = %v", got["memory"])
	}
	if _, got := runtimeContext(t, e, http.Header{}, `{"model":"m","messages":[{"role":"user","content":"hi"}],"promptgate":{"user":"../alice"}}`); fmt.Sprint(got["memory"]) != "map[]" {
		t.Errorf("user ../alice: memory = %v", got["memory"])
	}

	// tech is minimal: memory (minMode standard) is absent, not skipped.
	_, got = runtimeContext(t, e, http.Header{}, `{"model":"m","messages":[{"role":"user","content":"hi"}],"promptgate":{"user":"alice","protocol":"tech"}}`)
	if got["memory"] != nil || fmt.Sprint(got["meta"].(map[string]any)["sources"]) != "[]" {
		t.Errorf("tech (minimal): %v", got)
	}

	// private is full: the required source that fails makes the request fail.
	_, err := e.Preview(context.Background(), proxy.Input{Path: proxy.PathChat, Header: http.Header{},
		Body: []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"promptgate":{"user":"alice","protocol":"private"}}`)})
	if !errors.Is(err, plugins.ErrRequiredFailed) {
		t.Errorf("required source failed: err = %v", err)
	}
}

func TestThroughTheRealProxyModuleOff(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "alice.json"), `{"x":1}`)
	mem := built["filememory"]
	cfgYAML := fmt.Sprintf(`
plugins:
  - {name: memory, path: %q, sha256: %q, module: memory, minMode: standard, config: {dir: %q}}
`, mem.path, mem.sha256, dir)
	e := proxyEngine(t, cfgYAML,
		`{"id": "quiet", "promptTemplate": {"base": "base_tool_call_v2"}, "allowClientSelection": true,
		  "scope": ["prompt_modules:full", "prompt_modules:memory_off"], "tools": {"allow": ["*"]}}`)
	if _, got := runtimeContext(t, e, http.Header{}, `{"model":"m","messages":[{"role":"user","content":"hi"}],"promptgate":{"user":"alice"}}`); fmt.Sprint(got["memory"]) != "map[x:1]" {
		t.Errorf("neutral: %v", got)
	}
	_, got := runtimeContext(t, e, http.Header{}, `{"model":"m","messages":[{"role":"user","content":"hi"}],"promptgate":{"user":"alice","protocol":"quiet"}}`)
	if got["memory"] != nil || fmt.Sprint(got["meta"].(map[string]any)["skipped"]) != "[map[reason:module off source:memory]]" {
		t.Errorf("prompt_modules:memory_off: %v", got)
	}
}
