package assembly

import (
	"slices"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy"
)

// TestMessagesMCPConnector: mcp_servers and every mcp_toolset entry are one tool, ToolMCP (an mcp_toolset is
// that whatever name it carries); mcp_servers leaves the body when ToolMCP is not kept.
func TestMessagesMCPConnector(t *testing.T) {
	body := `{"messages":[],"mcp_servers":[{"type":"url","url":"https://mcp.example.com/sse","name":"a"}],` +
		`"tools":[{"name":"f"},{"type":"mcp_toolset","mcp_server_name":"a"},{"type":"mcp_toolset","name":"f2","mcp_server_name":"a"}]}`
	m, err := ParseMessages([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(m.Tools); !slices.Equal(got, []string{"f", ToolMCP}) {
		t.Errorf("tools %q", got)
	}
	m, err = ParseMessages([]byte(`{"messages":[],"mcp_servers":[{"type":"url","url":"https://x","name":"a"}]}`))
	if err != nil || !slices.Equal(toolNames(m.Tools), []string{ToolMCP}) {
		t.Errorf("mcp_servers alone: %v %+v", err, m)
	}
	m, err = ParseMessages([]byte(`{"messages":[],"mcp_servers":[]}`))
	if err != nil || len(m.Tools) != 0 {
		t.Errorf("empty mcp_servers: %v %+v", err, m)
	}
	_, err = ParseMessages([]byte(`{"messages":[],"mcp_servers":{"name":"a"}}`))
	wantPolicyError(t, err, "invalid_request", "mcp_servers")

	out, err := RewriteMessages([]byte(body), Prompt{}, []policy.Tool{{Name: "f"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if gjson.GetBytes(out, "mcp_servers").Exists() || gjson.GetBytes(out, "tools").Raw != `[{"name":"f"}]` {
		t.Errorf("mcp not kept: %s", out)
	}
	// Even a caller that reports no removal cannot let it through.
	if out, _ = RewriteMessages([]byte(body), Prompt{}, nil, false); gjson.GetBytes(out, "mcp_servers").Exists() {
		t.Errorf("no removal reported: %s", out)
	}
	out, _ = RewriteMessages([]byte(body), Prompt{}, []policy.Tool{{Name: "f"}, {Name: ToolMCP}}, false)
	if gjson.GetBytes(out, "mcp_servers").Raw != gjson.Get(body, "mcp_servers").Raw || gjson.GetBytes(out, "tools").Raw != gjson.Get(body, "tools").Raw {
		t.Errorf("mcp kept: %s", out)
	}
}
