package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/store"
)

// previewBody is the body of POST /admin/prompts/preview. Request keeps the request's bytes exactly
// as sent, so the preview sees what the proxy would. Path chooses the surface:
// "/v1/chat/completions" (the default), "/v1/responses" or "/v1/messages", the path the client
// would POST Request to. Candidate names a stored version to prepare the request with as if it were
// active (see candidateBody).
type previewBody struct {
	Request   json.RawMessage   `json:"request"`
	Headers   map[string]string `json:"headers"`
	Protocol  string            `json:"protocol"`
	Path      *string           `json:"path"`
	Candidate json.RawMessage   `json:"candidate"`
}

// candidateBody is a preview's candidate, a stored version (active or not):
// {"kind":"protocols"|"templates","name":"...","version":N}.
type candidateBody struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Version *int   `json:"version"`
}

// POST /admin/prompts/preview {"request":{...},"headers":{...},"protocol":"optional",
// "path":"optional","candidate":{"kind","name","version"} optional} → the preview report: with a
// candidate, of the request as the proxy would send it if that version were active. Errors of the
// request itself are answered exactly as the proxy would answer them.
func (s *server) preview(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var req previewBody
	if err := decodeStrict(body, &req, "request", "headers", "protocol", "path", "candidate"); err != nil {
		return err
	}
	cand, err := s.candidate(r.Context(), req.Candidate)
	if err != nil {
		return err
	}
	path := proxy.PathChat
	if req.Path != nil {
		path = *req.Path
		if !proxy.PreviewPath(path) {
			return badRequest("invalid_request", "path", "path %q: preview one of %s (the path the client would POST the request to; default %s)",
				path, strings.Join(proxy.PreviewPaths(), ", "), proxy.PathChat)
		}
	}
	if len(req.Request) == 0 || string(req.Request) == "null" {
		return badRequest("invalid_request", "request", `request: required: the request to preview as the client would send it to path, e.g. {"request":{"model":"gpt-4o","messages":[...]}}`)
	}
	h := http.Header{}
	for k, v := range req.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return badRequest("invalid_request", "headers", "headers: %q is not a header name", k)
		}
		h.Set(k, v)
	}
	report, err := s.o.Preview(r.Context(), proxy.Input{Path: path, Header: h, Body: req.Request, ForceProtocol: req.Protocol, Candidate: cand})
	if err != nil {
		if r.Context().Err() != nil {
			return err
		}
		status, eb := proxy.APIError(err)
		if status >= 500 {
			s.log.Error("admin: preview failed", "request_id", r.Context().Value(requestIDKey{}), "status", status, "err", err)
		}
		writeRaw(w, status, eb)
		return nil
	}
	writeRaw(w, http.StatusOK, report)
	return nil
}

// candidate reads a preview's candidate and returns the stored version it names (nil: none).
func (s *server) candidate(ctx context.Context, raw json.RawMessage) (*store.Record, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	const want = `candidate: want {"kind":"protocols" or "templates","name":"...","version":N}, a stored version`
	if !gjson.ParseBytes(raw).IsObject() {
		return nil, badRequest("invalid_request", "candidate", "%s", want)
	}
	var c candidateBody
	if err := decodeStrict(raw, &c, "kind", "name", "version"); err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			ae.msg, ae.param = "candidate: "+ae.msg, strings.TrimSuffix("candidate."+ae.param, ".")
		}
		return nil, err
	}
	k := store.Kind(c.Kind)
	switch {
	case k != store.KindProtocol && k != store.KindTemplate:
		return nil, badRequest("invalid_request", "candidate.kind", "candidate.kind %q: %s", c.Kind, want)
	case c.Name == "":
		return nil, badRequest("invalid_request", "candidate.name", "candidate.name: required; %s", want)
	case c.Version == nil || *c.Version < 1:
		return nil, badRequest("invalid_request", "candidate.version", "candidate.version: required, a version number (1 or more); %s", want)
	}
	rec, err := s.o.Store.Get(ctx, k, c.Name, *c.Version)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &apiError{status: http.StatusNotFound, code: "not_found", param: "candidate", msg: "candidate: " + storeMessage(err)}
	}
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// toolReply is one runtime enablement override.
type toolReply struct {
	Name      string    `json:"name"`
	Enabled   bool      `json:"enabled"`
	Author    string    `json:"author,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// GET /admin/tools → {"tools":[{"name","enabled","author","updatedAt"}]}: the operator's overrides,
// by name.
func (s *server) listTools(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	snap, err := s.o.Store.Snapshot(r.Context())
	if err != nil {
		return err
	}
	out := make([]toolReply, 0, len(snap.Tools))
	for name, o := range snap.Tools {
		out = append(out, toolReply{Name: name, Enabled: o.Enabled, Author: o.Author, UpdatedAt: o.UpdatedAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return writeJSON(w, http.StatusOK, map[string][]toolReply{"tools": out})
}

type enabledBody struct {
	Enabled *bool `json:"enabled"`
}

// PUT /admin/tools/{name}/enabled {"enabled":false} → {"name","enabled"}: the kill switch,
// persisted.
func (s *server) setTool(w http.ResponseWriter, r *http.Request) error {
	who, body, err := change(w, r)
	if err != nil {
		return err
	}
	var req enabledBody
	if err := decodeStrict(body, &req, "enabled"); err != nil {
		return err
	}
	if req.Enabled == nil {
		return badRequest("invalid_request", "enabled", `enabled: required, true or false, e.g. {"enabled":false}`)
	}
	name := r.PathValue("name")
	if err := s.o.Store.SetToolEnabled(r.Context(), name, *req.Enabled, who); err != nil {
		if errors.Is(err, store.ErrInvalid) {
			return badRequest("invalid_request", "name", "%s", storeMessage(err))
		}
		return err
	}
	verdict := audit.VerdictEnabled
	if !*req.Enabled {
		verdict = audit.VerdictDisabled
	}
	s.record(r, audit.Event{Kind: audit.KindToolEnablement, Target: "tools/" + name, Tool: name, Verdict: verdict, Actor: who})
	return writeJSON(w, http.StatusOK, struct {
		Name    string `json:"name"`
		Enabled bool   `json:"enabled"`
	}{name, *req.Enabled})
}

// DELETE /admin/tools/{name}/enabled → {"name","cleared":true}: the config decides again; 404 when
// no override is set.
func (s *server) clearTool(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	who, err := actor(r)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := s.o.Store.ClearToolEnabled(r.Context(), name); err != nil {
		return err
	}
	s.record(r, audit.Event{Kind: audit.KindToolEnablement, Target: "tools/" + name, Tool: name, Verdict: audit.VerdictCleared, Actor: who})
	return writeJSON(w, http.StatusOK, struct {
		Name    string `json:"name"`
		Cleared bool   `json:"cleared"`
	}{name, true})
}

// auditVerdicts and auditKinds are the values an event can have: a filter with another is a typo.
func auditVerdicts() []string {
	return []string{audit.VerdictRemoved, audit.VerdictAllowed, audit.VerdictBlocked, audit.VerdictAudited,
		audit.VerdictHeld, audit.VerdictConfirmed, audit.VerdictExpired, audit.VerdictReused,
		audit.VerdictChanged, audit.VerdictEnabled, audit.VerdictDisabled, audit.VerdictCleared,
		audit.VerdictPinned, audit.VerdictFlagged, audit.VerdictApproved}
}

func auditKinds() []string {
	return []string{audit.KindToolRemoved, audit.KindToolCall, audit.KindProvenance, audit.KindFlow, audit.KindBudget, audit.KindConfirm,
		audit.KindStoredPrompt, audit.KindVersionAdded, audit.KindActivated, audit.KindRolledBack,
		audit.KindRolloutApplied, audit.KindRolloutReverted, audit.KindToolEnablement,
		audit.KindMCPCall, audit.KindMCPList, audit.KindMCPDefinition, audit.KindShadow, audit.KindShadowChanged}
}

// GET /admin/audit?limit=&requestId=&verdict=&protocol=&kind=&tool=&since=&until= →
// {"events":[...]}, newest first; since is inclusive, until exclusive.
func (s *server) audit(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "limit", "requestId", "verdict", "protocol", "kind", "tool", "since", "until")
	if err != nil {
		return err
	}
	f := audit.Filter{
		RequestID: q.Get("requestId"), Verdict: q.Get("verdict"), Protocol: q.Get("protocol"),
		Kind: q.Get("kind"), Tool: q.Get("tool"),
	}
	// A verdict or kind no event can have is a typo (verdict=block): say so rather than answer an
	// empty list.
	if v := f.Verdict; v != "" && !slices.Contains(auditVerdicts(), v) {
		return badRequest("invalid_request", "verdict", "verdict %q: want one of %s", v, strings.Join(auditVerdicts(), ", "))
	}
	if k := f.Kind; k != "" && !slices.Contains(auditKinds(), k) {
		return badRequest("invalid_request", "kind", "kind %q: want one of %s", k, strings.Join(auditKinds(), ", "))
	}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 1 || n > audit.MaxQueryLimit {
			return badRequest("invalid_request", "limit", "limit %q: want a number from 1 to %d (default %d)", q.Get("limit"), audit.MaxQueryLimit, audit.DefaultQueryLimit)
		}
		f.Limit = n
	}
	for _, t := range []struct {
		param string
		to    *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if !q.Has(t.param) {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, q.Get(t.param))
		if err != nil {
			return badRequest("invalid_request", t.param, "%s %q: want an RFC 3339 time, e.g. 2026-02-24T10:00:00Z", t.param, q.Get(t.param))
		}
		*t.to = v
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since) {
		return badRequest("invalid_request", "until", "until %s is not after since %s: the range is empty", q.Get("until"), q.Get("since"))
	}
	if s.o.Audit == nil {
		return writeJSON(w, http.StatusOK, map[string][]audit.Event{"events": {}})
	}
	s.flushAudit(r.Context())
	events, err := s.o.Audit.Query(r.Context(), f)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string][]audit.Event{"events": events})
}

// flushAudit lets the ring write what was recorded just before (such as this operator's last
// change), without waiting long.
func (s *server) flushAudit(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, auditFlushWait)
	_ = s.o.Audit.FlushContext(ctx)
	cancel()
}

// GET /admin/rollouts → {"applied":[AppliedRollout...]}, oldest first.
func (s *server) listRollouts(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	applied, err := s.o.Store.Rollouts(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, map[string][]store.AppliedRollout{"applied": applied})
}

// POST /admin/rollouts body: a rollout file → 201 the AppliedRollout; 409 already_applied.
func (s *server) applyRollout(w http.ResponseWriter, r *http.Request) error {
	who, body, err := change(w, r)
	if err != nil {
		return err
	}
	ro, err := store.ParseRollout(body)
	if err != nil {
		return badRequest("invalid_definition", "", "rollout: %v", err)
	}
	newTemplates, newProtocols := map[string]bool{}, map[string]bool{}
	for _, t := range ro.Templates {
		newTemplates[gjson.GetBytes(t, "name").String()] = true
	}
	for _, p := range ro.Protocols {
		newProtocols[gjson.GetBytes(p, "id").String()] = true
	}
	for i, p := range ro.Protocols {
		if err := s.checkReferences(r.Context(), p, newTemplates, newProtocols); err != nil {
			var ae *apiError
			if errors.As(err, &ae) {
				ae.msg = fmt.Sprintf("rollout %q: protocols[%d]: %s", ro.ID, i, ae.msg)
			}
			return err
		}
	}
	if err := s.o.Store.ApplyRollout(r.Context(), ro); err != nil {
		return err
	}
	applied, err := s.findApplied(r.Context(), ro.ID)
	if err != nil {
		return err
	}
	s.record(r, audit.Event{Kind: audit.KindRolloutApplied, Target: "rollouts/" + ro.ID, Verdict: audit.VerdictChanged,
		Actor: who, Reason: "activated " + versions(applied.Activated)})
	return writeJSON(w, http.StatusCreated, applied)
}

// findApplied returns the applied rollout with that id.
func (s *server) findApplied(ctx context.Context, id string) (store.AppliedRollout, error) {
	all, err := s.o.Store.Rollouts(ctx)
	if err != nil {
		return store.AppliedRollout{}, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].ID == id {
			return all[i], nil
		}
	}
	return store.AppliedRollout{}, fmt.Errorf("admin: rollout %q applied but not listed", id)
}

// POST /admin/rollouts/revert → the AppliedRollout that was reverted; 409 nothing_to_revert.
func (s *server) revertRollout(w http.ResponseWriter, r *http.Request) error {
	who, body, err := change(w, r)
	if err != nil {
		return err
	}
	if err := decodeStrict(body, &struct{}{}); err != nil {
		return err
	}
	ar, err := s.o.Store.RevertLast(r.Context())
	if err != nil {
		return err
	}
	s.record(r, audit.Event{Kind: audit.KindRolloutReverted, Target: "rollouts/" + ar.ID, Verdict: audit.VerdictChanged,
		Actor: who, Reason: "restored " + versions(ar.Previous)})
	return writeJSON(w, http.StatusOK, ar)
}

// versions renders a rollout's map as "protocols/tech@3, templates/x@none", sorted.
func versions(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		if m[k] == 0 {
			parts[i] = k + "@none"
		} else {
			parts[i] = k + "@" + strconv.Itoa(m[k])
		}
	}
	return strings.Join(parts, ", ")
}
