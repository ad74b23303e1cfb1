package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/proxy/config"
)

// The config snippets of docs/mcp.md and docs/plugins.md load through the config loader (the Go
// example of plugins.md is built and run by plugins/docs_test.go; its commands are checked by
// TestDocsCommandsAreReal).

// TestMCPConfigLoads: the MCP door's config section loads as the page shows it.
func TestMCPConfigLoads(t *testing.T) {
	t.Parallel()
	yamls := blocksOf(docPage(t, "docs/mcp.md"), "yaml")
	if len(yamls) != 1 {
		t.Fatalf("%d YAML blocks: update this test", len(yamls))
	}
	f, err := config.Parse([]byte(yamls[0]))
	if err != nil {
		t.Fatalf("the page's config: %v", err)
	}
	s := f.MCP.Servers
	if len(s) != 1 || s[0].Name != "crm" || s[0].ToolPrefix != "crm_" || f.MCP.OnDefinitionChange != "block" || f.MCP.UnknownMethods != "refuse" {
		t.Errorf("the config read is not the one shown: %+v", f.MCP)
	}
}

// TestPluginsEntryLoads: the plugin entry of the page loads, its checksum placeholder filled in,
// with the values it shows.
func TestPluginsEntryLoads(t *testing.T) {
	t.Parallel()
	yamls := blocksOf(docSection(t, "docs/plugins.md", "Write and run one in under 40 lines"), "yaml")
	if len(yamls) != 1 || strings.Count(yamls[0], `"3f0c...e91a"`) != 1 {
		t.Fatalf("the plugin entry changed: update this test")
	}
	f, err := config.Parse([]byte(strings.Replace(yamls[0], `"3f0c...e91a"`, strings.Repeat("a", 64), 1)))
	if err != nil {
		t.Fatalf("the page's plugin entry: %v", err)
	}
	p := f.Plugins
	if len(p) != 1 || p[0].Name != "team" || p[0].Module != "team" || p[0].Config["team"] != "payments" {
		t.Errorf("the entry read is not the one shown: %+v", p)
	}
}

// TestPerformanceFiguresHaveCommands: every area of docs/performance.md gives the command that
// reproduces its figures (the commands themselves are checked by TestDocsCommandsAreReal), and the
// areas other pages and issues point at are there.
func TestPerformanceFiguresHaveCommands(t *testing.T) {
	t.Parallel()
	const page = "docs/performance.md"
	text := docPage(t, page)
	var titles []string
	for _, h := range headings(text) {
		if h.level == 2 {
			titles = append(titles, h.title)
		}
	}
	for _, want := range []string{"The stream relay", "Tool calls checked by the schema subset validator (issue 34)", "Stage benchmarks"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no section %q", want)
		}
	}
	if !strings.Contains(docSection(t, page, "The stream relay"), "### The Gemini surface's stream relay") {
		t.Error("the Gemini stream relay's figures are gone")
	}
	for _, title := range titles {
		if title == "Machine and conditions" {
			continue
		}
		sec := docSection(t, page, title)
		if !strings.Contains(sec, "go test ") && !strings.Contains(sec, "go run ./cmd/promptgate-bench") && !strings.Contains(sec, "/tmp/pgb ") {
			t.Errorf("the section %q gives no command that reproduces its figures", title)
		}
	}
}
