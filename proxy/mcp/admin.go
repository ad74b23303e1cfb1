package mcp

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/mcppin"
)

// The admin routes of the door, served by the admin listener (behind its token and Host rules)
// under AdminPrefix.
const AdminPrefix = "/admin/mcp/"

// Admin is the door's part of the admin API:
//
//	GET  /admin/mcp/servers                              the servers, their pins and the recent calls
//	GET  /admin/mcp/servers/{server}/versions            the versions of the server's pin set
//	GET  /admin/mcp/servers/{server}/tools/{tool}/diff   a tool's pinned and pending definitions, what differs
//	POST /admin/mcp/servers/{server}/tools/{tool}/approve {"digest":"..."}: pin the pending definition
//
// A pin set is a definition of the store (kind mcppins): its versions are read, activated and
// rolled back under /admin/mcppins/{server} like the other definitions. rec receives the approvals
// (with the actor of the X-Promptgate-Actor header).
func (d *Door) Admin(rec audit.Recorder) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+AdminPrefix+"servers", d.adminServers)
	mux.HandleFunc("GET "+AdminPrefix+"servers/{server}/versions", d.adminVersions)
	mux.HandleFunc("GET "+AdminPrefix+"servers/{server}/tools/{tool}/diff", d.adminDiff)
	mux.HandleFunc("POST "+AdminPrefix+"servers/{server}/tools/{tool}/approve", func(w http.ResponseWriter, r *http.Request) {
		d.adminApprove(w, r, rec)
	})
	return mux
}

// serverView is one server as the admin API shows it.
type serverView struct {
	Name       string `json:"name"`
	Origin     string `json:"origin"`
	Protocol   string `json:"protocol,omitempty"`
	ToolPrefix string `json:"toolPrefix,omitempty"`
	Fresh      bool   `json:"fresh"`
	// Version is the active version of the server's pin set (0 before the first pin); Stored says
	// whether the sets are kept in the store (else in this instance's memory).
	Version int   `json:"version"`
	Stored  bool  `json:"stored"`
	Tools   []Pin `json:"tools"`
}

func (d *Door) adminServers(w http.ResponseWriter, _ *http.Request) {
	pins := d.o.Pins.List()
	out := struct {
		Servers            []serverView `json:"servers"`
		RequireModelCall   bool         `json:"requireModelCall"`
		OnDefinitionChange string       `json:"onDefinitionChange"`
		Recent             []recentCall `json:"recentCalls"`
	}{Servers: []serverView{}, RequireModelCall: d.o.Config.RequireModelCall, OnDefinitionChange: d.o.Config.OnDefinitionChange, Recent: d.recent.list()}
	for _, s := range d.o.Config.Servers {
		u := s.Endpoint()
		v := serverView{Name: s.Name, Origin: u.Scheme + "://" + u.Host, Protocol: s.Protocol, ToolPrefix: s.ToolPrefix,
			Fresh: d.o.Pins.Fresh(s.Name), Version: d.o.Pins.Version(s.Name), Stored: d.o.Store != nil, Tools: []Pin{}}
		for _, p := range pins {
			if p.Server == s.Name {
				v.Tools = append(v.Tools, p)
			}
		}
		out.Servers = append(out.Servers, v)
	}
	writeJSON(w, http.StatusOK, out)
}

func (d *Door) adminVersions(w http.ResponseWriter, r *http.Request) {
	server := r.PathValue("server")
	if d.servers[server] == nil {
		proxy.WriteError(w, http.StatusNotFound, "not_found", "no such MCP server in the config (mcp.servers)", "")
		return
	}
	e, stored, err := d.o.Pins.Versions(r.Context(), server)
	switch {
	case err != nil:
		d.log.Error("the versions of a pin set cannot be read", "server", server, "err", err)
		proxy.WriteError(w, http.StatusServiceUnavailable, "store_unavailable", "the store does not answer: try again", "")
	case !stored:
		proxy.WriteError(w, http.StatusNotFound, "not_stored", "this door keeps its pins in memory (no store): there are no versions", "")
	default:
		writeJSON(w, http.StatusOK, e)
	}
}

// diffView is what changed between a tool's pinned and pending definitions.
type diffView struct {
	Server  string             `json:"server"`
	Tool    string             `json:"tool"`
	Version int                `json:"version"`
	Pinned  *mcppin.Definition `json:"pinned"`
	Pending *mcppin.Definition `json:"pending"`
	// Changed names the fields that differ: description, inputSchema, extra (the other members).
	Changed []string `json:"changed"`
	// Properties are the input schema's top-level properties added, removed or changed.
	Properties map[string][]string `json:"properties"`
}

func (d *Door) adminDiff(w http.ResponseWriter, r *http.Request) {
	pin, ok := d.o.Pins.Tool(r.PathValue("server"), r.PathValue("tool"))
	if !ok {
		proxy.WriteError(w, http.StatusNotFound, "not_found", "no such tool of that server has been listed", "")
		return
	}
	v := diffView{Server: pin.Server, Tool: pin.Tool, Version: pin.Version, Pinned: pin.Pinned, Pending: pin.Pending, Changed: []string{},
		Properties: map[string][]string{"added": {}, "removed": {}, "changed": {}}}
	if pin.Pinned != nil && pin.Pending != nil {
		if pin.Pinned.Description != pin.Pending.Description {
			v.Changed = append(v.Changed, "description")
		}
		if mcppin.Digest(mcppin.Definition{InputSchema: pin.Pinned.InputSchema}) != mcppin.Digest(mcppin.Definition{InputSchema: pin.Pending.InputSchema}) {
			v.Changed = append(v.Changed, "inputSchema")
		}
		if mcppin.Digest(mcppin.Definition{Extra: pin.Pinned.Extra}) != mcppin.Digest(mcppin.Definition{Extra: pin.Pending.Extra}) {
			v.Changed = append(v.Changed, "extra")
		}
		before := gjson.GetBytes(pin.Pinned.InputSchema, "properties")
		after := gjson.GetBytes(pin.Pending.InputSchema, "properties")
		after.ForEach(func(k, val gjson.Result) bool {
			switch old := before.Get(escapePath(k.String())); {
			case !old.Exists():
				v.Properties["added"] = append(v.Properties["added"], k.String())
			case mcppin.Digest(mcppin.Definition{InputSchema: []byte(old.Raw)}) != mcppin.Digest(mcppin.Definition{InputSchema: []byte(val.Raw)}):
				v.Properties["changed"] = append(v.Properties["changed"], k.String())
			}
			return true
		})
		before.ForEach(func(k, _ gjson.Result) bool {
			if !after.Get(escapePath(k.String())).Exists() {
				v.Properties["removed"] = append(v.Properties["removed"], k.String())
			}
			return true
		})
	}
	writeJSON(w, http.StatusOK, v)
}

func (d *Door) adminApprove(w http.ResponseWriter, r *http.Request, rec audit.Recorder) {
	var body struct {
		Digest string `json:"digest"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || body.Digest == "" {
		proxy.WriteError(w, http.StatusBadRequest, "invalid_request", `send {"digest": "<the pending definition's digest>"}, the one you reviewed`, "digest")
		return
	}
	actor := strings.TrimSpace(r.Header.Get("X-Promptgate-Actor"))
	if actor == "" {
		actor = "admin"
	}
	server, tool := r.PathValue("server"), r.PathValue("tool")
	pin, ok, err := d.o.Pins.Approve(r.Context(), server, tool, body.Digest, actor)
	if !ok {
		proxy.WriteError(w, http.StatusConflict, "not_pending", "that tool has no pending definition with this digest: read its diff again", "digest")
		return
	}
	if err != nil {
		d.log.Error("an approved definition could not be stored; it is not pinned", "server", server, "err", err)
		proxy.WriteError(w, http.StatusServiceUnavailable, "store_unavailable", "the store did not take the approval, and nothing is pinned: approve it again once the store answers", "")
		return
	}
	if rec != nil {
		rec.Record(r.Context(), audit.Event{Time: time.Now().UTC(), RequestID: r.Header.Get(proxy.HeaderRequestID), Kind: KindDefinition,
			Tool: tool, Verdict: VerdictApproved, Reason: "pending definition pinned", Rule: "sha256:" + body.Digest[:min(16, len(body.Digest))],
			Actor: actor, Target: "mcp/" + server, Version: pin.Version})
	}
	writeJSON(w, http.StatusOK, pin)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		proxy.WriteError(w, http.StatusInternalServerError, "internal_error", "mcp: "+err.Error(), "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
