package plugins_test

import (
	"strings"
	"testing"

	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/policy/modules"
)

// TestDocsExample runs the example of docs/plugins.md ("write and run a context source in under
// 40 lines") through the host, with the config the page shows.
func TestDocsExample(t *testing.T) {
	if n := strings.Count(strings.TrimSpace(docExampleFile), "\n") + 1; n >= 40 {
		t.Errorf("the docs' example has %d lines; the page promises under 40", n)
	}
	e := entry("team", "docexample", map[string]any{"team": "payments"})
	e.Module, e.MinMode = "team", "standard"
	h := startHost(t, plugins.HostOptions{}, e)
	r := collect(t, h, gather.Query{Protocol: "neutral", Mode: modules.Standard, User: "u-1"})
	got := fields(t, r, "team")
	if got["team"] != "payments" || got["day"] == nil || got["user"] != nil {
		t.Errorf("standard: %s", ctxjson.Encode(r.Sources[0].Value))
	}
	if r.Notes["team"][0] != "greeting ran" {
		t.Errorf("notes %v", r.Notes)
	}
	if got := fields(t, collect(t, h, gather.Query{Mode: modules.Full, User: "u-1"}), "team"); got["user"] != "u-1" {
		t.Errorf("full: %v", got)
	}
	if r := collect(t, h, gather.Query{Mode: modules.Minimal}); len(r.Sources)+len(r.Skipped) != 0 {
		t.Errorf("minimal: %+v", r)
	}
}
