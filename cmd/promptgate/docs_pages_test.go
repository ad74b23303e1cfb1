package main

import (
	"strings"
	"testing"

	"github.com/promptgate/promptgate/proxy/config"
)

// The config snippets of docs/mcp.md and docs/plugins.md load through the config loader (the Go example of
// plugins.md is built and run by plugins/docs_test.go; its commands are checked by TestDocsCommandsAreReal).

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

// TestPluginsEntryLoads: the plugin entry of the page loads, its checksum placeholder filled in, with the
// values it shows.
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
