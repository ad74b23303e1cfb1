package admin

import (
	"net/http"
	"sort"

	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy/toolseen"
	"github.com/promptgate/promptgate/store"
)

// Where a tool's enablement comes from, in the inventory.
const (
	enabledByOverride = "override" // the kill switch (PUT /admin/tools/{name}/enabled)
	enabledByConfig   = "config"   // tools.NAME.enabled in the config file
	enabledByDefault  = "default"  // neither: enabled
)

// inventoryTool is one tool of GET /admin/tools/inventory.
type inventoryTool struct {
	Name string `json:"name"`
	// Enabled is the tool's runtime enablement, and EnabledBy where it comes from.
	Enabled   bool   `json:"enabled"`
	EnabledBy string `json:"enabledBy"`
	// Config is the config file's policy of the tool, absent when it has none.
	Config *configTool `json:"config,omitempty"`
	// Override is the operator's kill switch, absent when none is set.
	Override *store.ToolOverride `json:"override,omitempty"`
	// Seen is what the proxy listener remembers of requests that declared the tool, absent when
	// none did since the start.
	Seen *toolseen.Sighting `json:"seen,omitempty"`
}

// configTool is policy.ToolConfig as JSON.
type configTool struct {
	Enabled          *bool    `json:"enabled"`
	Scope            string   `json:"scope"`
	AllowedProtocols []string `json:"allowedProtocols"`
}

// GET /admin/tools/inventory → {"tools":[...]}: every tool configured, switched, or seen since the
// start, by name.
func (s *server) toolInventory(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	snap, err := s.o.Store.Snapshot(r.Context())
	if err != nil {
		return err
	}
	byName := map[string]*inventoryTool{}
	get := func(name string) *inventoryTool {
		t := byName[name]
		if t == nil {
			t = &inventoryTool{Name: name}
			byName[name] = t
		}
		return t
	}
	for name, c := range s.o.ToolPolicy {
		get(name).Config = fromConfig(c)
	}
	for name, o := range snap.Tools {
		get(name).Override = &o
	}
	for _, seen := range s.o.Tools.List() {
		get(seen.Name).Seen = &seen
	}
	out := make([]inventoryTool, 0, len(byName))
	for _, t := range byName {
		switch {
		case t.Override != nil:
			t.Enabled, t.EnabledBy = t.Override.Enabled, enabledByOverride
		case t.Config != nil && t.Config.Enabled != nil:
			t.Enabled, t.EnabledBy = *t.Config.Enabled, enabledByConfig
		default:
			t.Enabled, t.EnabledBy = true, enabledByDefault
		}
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return writeJSON(w, http.StatusOK, map[string][]inventoryTool{"tools": out})
}

func fromConfig(c policy.ToolConfig) *configTool {
	p := c.AllowedProtocols
	if p == nil {
		p = []string{}
	}
	return &configTool{Enabled: c.Enabled, Scope: c.Scope, AllowedProtocols: p}
}
