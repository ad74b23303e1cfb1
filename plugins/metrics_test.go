package plugins_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/policy/modules"
	"github.com/promptgate/promptgate/proxy/telemetry/metrics"
)

// TestPluginErrorSeriesBounded: a plugin that fails with a message of its own for every user adds
// one series to promptgate_plugin_errors_total, labelled by class, whatever it says; no user id
// reaches the token-less /metrics. The message itself goes to meta.skipped and the log.
func TestPluginErrorSeriesBounded(t *testing.T) {
	var logs bytes.Buffer
	h := startHost(t, plugins.HostOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))},
		entry("profile", "testsource", map[string]any{"behavior": "usererror"}),
		entry("failing", "testsource", map[string]any{"behavior": "badutf8"}))
	m := metrics.New(nil)
	h.Observe(m.Plugin)
	const users = 1000
	for i := range users {
		r := collect(t, h, gather.Query{Mode: modules.Minimal, User: fmt.Sprintf("user-%04d", i)})
		if i == 0 && skipReason(r, "profile") != "error: no profile for user user-0000" {
			t.Fatalf("meta.skipped reason %q, want the plugin's message", skipReason(r, "profile"))
		}
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var series []string
	for line := range strings.Lines(string(text)) {
		if strings.HasPrefix(line, "promptgate_plugin_errors_total{") {
			series = append(series, strings.TrimSpace(line))
		}
	}
	want := []string{
		`promptgate_plugin_errors_total{reason="bad_answer",source="failing"} 1000`,
		`promptgate_plugin_errors_total{reason="error",source="profile"} 1000`,
	}
	if strings.Join(series, "\n") != strings.Join(want, "\n") {
		t.Errorf("%d series after %d distinct plugin errors:\n%s\nwant\n%s", len(series), users, truncate(series, 5), strings.Join(want, "\n"))
	}
	if strings.Contains(string(text), "user-0") {
		t.Error("a user id reached /metrics")
	}
	if !strings.Contains(logs.String(), "no profile for user user-0999") {
		t.Error("the plugin's message is not in the log")
	}
}

func truncate(lines []string, n int) string {
	if len(lines) > n {
		lines = append(lines[:n:n], "...")
	}
	return strings.Join(lines, "\n")
}
