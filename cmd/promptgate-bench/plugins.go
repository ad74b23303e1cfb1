package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/plugins/sdk"
)

// Everything the run knows about context-source plugins is in this file, so that the plugin
// workloads can be switched off in one place (pluginsAvailable) while the plugin host changes.

// pluginsAvailable says whether package plugins has a host (plugins.NewHost) to run the plugin
// workloads.
const pluginsAvailable = true

// pluginsNote explains, in the report, why the plugin workloads did not run when they did not.
const pluginsNote = "pending plugins host: package plugins has no NewHost yet"

// benchPlugins are the plugin entries of the run, in order: the first is cached (the config's
// default cacheTTL), the others are asked on every request.
var benchPlugins = []struct {
	name   string
	cached bool
}{{"memory", true}, {"profile", false}, {"tickets", false}}

// pluginEntries is the plugins: section of the YAML for the first n bench plugins. Each is this
// very binary, which serves benchSource when the plugin host starts it (see runChildRole).
func pluginEntries(n int) (string, error) {
	if n > len(benchPlugins) {
		return "", fmt.Errorf("at most %d plugins", len(benchPlugins))
	}
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	sum, err := fileSHA256(exe)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("plugins:\n")
	for _, p := range benchPlugins[:n] {
		fmt.Fprintf(&b, "  - {name: %s, path: %q, sha256: %s, module: %s, minMode: minimal, timeout: 500ms, config: {name: %s}}\n",
			p.name, exe, sum, p.name, p.name)
	}
	return b.String(), nil
}

// uncache turns the answer cache off for the entries that are not cached.
func uncache(entries []plugins.Spec) {
	for i := range entries {
		if i < len(benchPlugins) && !benchPlugins[i].cached {
			entries[i].CacheTTL = 0
		}
	}
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func startPlugins(ctx context.Context, entries []plugins.Spec, log *slog.Logger) (*plugins.Host, error) {
	uncache(entries)
	return plugins.NewHost(ctx, entries, plugins.HostOptions{Logger: log})
}

// isPluginProcess reports whether the plugin host started this process.
func isPluginProcess() bool {
	h := sdk.Handshake()
	return os.Getenv(h.MagicCookieKey) == h.MagicCookieValue
}

// servePlugin serves benchSource until the host stops it.
func servePlugin() { sdk.Serve(&benchSource{}) }

// benchSource is a context source that answers at once with a fixed object of about 300 bytes.
type benchSource struct{ answer json.RawMessage }

func (s *benchSource) Describe() sdk.Description {
	return sdk.Description{Name: "promptgate-bench", Version: "1.0.0"}
}

func (s *benchSource) Configure(cfg map[string]any) error {
	var c struct {
		Name string `json:"name"`
	}
	if err := sdk.DecodeConfig(cfg, &c); err != nil {
		return err
	}
	s.answer = json.RawMessage(fmt.Sprintf(`{"bench":%q,"lang":"en","tz":"Europe/Zurich","facts":[%s]}`, c.Name,
		strings.TrimSuffix(strings.Repeat(`"prefers short answers",`, 10), ",")))
	return nil
}

func (s *benchSource) Gather(context.Context, sdk.Request) (sdk.Response, error) {
	return sdk.Response{Fields: s.answer}, nil
}
