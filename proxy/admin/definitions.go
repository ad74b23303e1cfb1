package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/store"
)

// Fields of protocol definitions that name other definitions.
const (
	fieldBase    = "promptTemplate.base"
	fieldExtends = "extends"
)

// target is the audit Target of a definition: "templates/NAME" or "protocols/ID".
func target(k store.Kind, name string) string { return store.Key(k, name) }

// changeEvent is the audit event of a change to a definition; protocol changes also fill Protocol,
// so that filtering the log by protocol shows them.
func changeEvent(k store.Kind, kind, name string, version int, who string) audit.Event {
	e := audit.Event{Kind: kind, Target: target(k, name), Version: version, Verdict: audit.VerdictChanged, Actor: who}
	if k == store.KindProtocol {
		e.Protocol, e.ProtocolVersion = name, version
	}
	return e
}

// GET /admin/{kind} → {"templates":[Entry...]} or {"protocols":[...]}.
func (s *server) list(k store.Kind) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if _, err := params(r); err != nil {
			return err
		}
		entries, err := s.o.Store.List(r.Context(), k)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, map[string][]store.Entry{string(k): entries})
	}
}

// GET /admin/{kind}/{name} →
// {"name","active","versions":[{"version","createdAt","author","note"}]}.
func (s *server) show(k store.Kind) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if _, err := params(r); err != nil {
			return err
		}
		e, err := s.o.Store.Entry(r.Context(), k, r.PathValue("name"))
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, e)
	}
}

// versionParam reads a version number (1 or more) from a path or query value.
func versionParam(param, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, badRequest("invalid_request", param, "%s %q: want a version number, 1 or more", param, v)
	}
	return n, nil
}

// GET /admin/{kind}/{name}/versions/{version} → the Record, with its body as JSON.
func (s *server) version(k store.Kind) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if _, err := params(r); err != nil {
			return err
		}
		v, err := versionParam("version", r.PathValue("version"))
		if err != nil {
			return err
		}
		rec, err := s.o.Store.Get(r.Context(), k, r.PathValue("name"), v)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, rec)
	}
}

// POST /admin/{kind}/{name}/versions [?note=] body: the definition → 201 {"version":N}, not active.
func (s *server) addVersion(k store.Kind) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		q, err := params(r, "note")
		if err != nil {
			return err
		}
		note := q.Get("note")
		if err := plainText(note, maxNoteLen); err != nil {
			return badRequest("invalid_request", "note", "note: %v", err)
		}
		who, err := actor(r)
		if err != nil {
			return err
		}
		body, err := readBody(w, r)
		if err != nil {
			return err
		}
		name := r.PathValue("name")
		if err := checkDefinitionName(k, name, body); err != nil {
			return err
		}
		if k == store.KindProtocol {
			if err := s.checkReferences(r.Context(), body, nil, nil); err != nil {
				return err
			}
		}
		v, err := s.o.Store.AddVersion(r.Context(), k, body, who, note)
		if err != nil {
			return err
		}
		e := changeEvent(k, audit.KindVersionAdded, name, v, who)
		e.Reason = note
		s.record(r, e)
		return writeJSON(w, http.StatusCreated, map[string]int{"version": v})
	}
}

// checkDefinitionName checks that body is a JSON object whose name (templates), id (protocols) or
// server (MCP pin sets) is the name in the URL.
func checkDefinitionName(k store.Kind, name string, body []byte) error {
	if !gjson.ValidBytes(body) {
		return badRequest("invalid_json", "", "request body: not valid JSON; send the %s definition", singular(k))
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return badRequest("invalid_definition", "", "request body: want the %s definition, a JSON object", singular(k))
	}
	key := store.NameKey(k)
	got := root.Get(key)
	if got.Type != gjson.String {
		return badRequest("invalid_definition", key, "%s: missing: the definition must carry its %s, %q", key, key, name)
	}
	if got.String() != name {
		return badRequest("invalid_definition", key, "%s: the body's %s is %q, but the URL names %q; they must be the same", key, key, got.String(), name)
	}
	return nil
}

func singular(k store.Kind) string {
	switch k {
	case store.KindProtocol:
		return "protocol"
	case store.KindMCPPins:
		return "MCP pin set"
	}
	return "template"
}

// checkReferences refuses a protocol definition whose promptTemplate.base names a template that
// exists neither in the store (any version) nor in the binary, or whose extends names such a
// protocol. Names in newTemplates and newProtocols (a rollout's own definitions) count as existing.
// A field of the wrong type is left to the store's validation, which names it; so are the links
// between workflows and their bases (the store's Links hook, run in the change's own transaction).
func (s *server) checkReferences(ctx context.Context, body []byte, newTemplates, newProtocols map[string]bool) error {
	id := gjson.GetBytes(body, "id").String()
	for _, ref := range []struct {
		field string
		kind  store.Kind
		known map[string]bool
	}{{fieldBase, store.KindTemplate, newTemplates}, {fieldExtends, store.KindProtocol, newProtocols}} {
		v := gjson.GetBytes(body, ref.field)
		if v.Type != gjson.String || v.String() == "" || ref.known[v.String()] {
			continue
		}
		ok, err := s.exists(ctx, ref.kind, v.String())
		if err != nil {
			return err
		}
		if !ok {
			return badRequest("invalid_definition", ref.field,
				"protocol %q: %s: %s %q exists neither in the store nor built into the binary: add it first (POST /admin/%s/%s/versions), or name another",
				id, ref.field, singular(ref.kind), v.String(), ref.kind, v.String())
		}
	}
	return nil
}

// exists reports whether name has any version in the store, or is built into the binary.
func (s *server) exists(ctx context.Context, k store.Kind, name string) (bool, error) {
	_, err := s.o.Store.Entry(ctx, k, name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, store.ErrNotFound):
		_, ok := store.Fallback(k, name)
		return ok, nil
	}
	return false, err
}

// activateBody is the body of POST .../activate.
type activateBody struct {
	Version *int `json:"version"`
}

// POST /admin/{kind}/{name}/activate {"version":N} → {"name","active":N}.
func (s *server) activate(k store.Kind) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		who, body, err := change(w, r)
		if err != nil {
			return err
		}
		var req activateBody
		if err := decodeStrict(body, &req, "version"); err != nil {
			return err
		}
		if req.Version == nil || *req.Version < 1 {
			return badRequest("invalid_request", "version", `version: required, a version number (1 or more), e.g. {"version":2}`)
		}
		name, v := r.PathValue("name"), *req.Version
		// The store reads the previous version in the transaction that moves the pointer: exact
		// even when another activation of the same name races this one.
		prev, err := s.o.Store.Activate(r.Context(), k, name, v)
		if err != nil {
			return err
		}
		e := changeEvent(k, audit.KindActivated, name, v, who)
		if prev != v {
			e.Reason = fmt.Sprintf("previously active: %d", prev)
		} else {
			e.Reason = "already active"
		}
		s.record(r, e)
		return writeJSON(w, http.StatusOK, activeReply{Name: name, Active: v, Previous: prev})
	}
}

type activeReply struct {
	Name   string `json:"name"`
	Active int    `json:"active"`
	// Previous is the version that was active just before this change (0 = none; equal to Active
	// when the activation was a no-op).
	Previous int `json:"previous"`
}

// POST /admin/{kind}/{name}/rollback → {"name","active":N}; 409 no_previous_version when there is
// none.
func (s *server) rollback(k store.Kind) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		who, body, err := change(w, r)
		if err != nil {
			return err
		}
		if err := decodeStrict(body, &struct{}{}); err != nil {
			return err
		}
		name := r.PathValue("name")
		v, from, err := s.o.Store.Rollback(r.Context(), k, name)
		if err != nil {
			return err
		}
		e := changeEvent(k, audit.KindRolledBack, name, v, who)
		e.Reason = fmt.Sprintf("from version %d", from)
		s.record(r, e)
		return writeJSON(w, http.StatusOK, activeReply{Name: name, Active: v, Previous: from})
	}
}

// GET /admin/{kind}/{name}/diff?from=A&to=B → {"from","to","diff"}: a unified diff of the template
// texts, or of the protocol definitions pretty-printed. to defaults to the active version, from to
// the version before to.
func (s *server) diff(k store.Kind) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		q, err := params(r, "from", "to")
		if err != nil {
			return err
		}
		name := r.PathValue("name")
		e, err := s.o.Store.Entry(r.Context(), k, name)
		if err != nil {
			return err
		}
		to := e.Active
		if q.Has("to") {
			if to, err = versionParam("to", q.Get("to")); err != nil {
				return err
			}
		} else if to == 0 {
			return badRequest("invalid_request", "to", "to: %s has no active version; give to=N", target(k, name))
		}
		from := to - 1
		if q.Has("from") {
			if from, err = versionParam("from", q.Get("from")); err != nil {
				return err
			}
		} else if from < 1 {
			return badRequest("invalid_request", "from", "from: there is no version before %d; give from=N", to)
		}
		a, err := s.o.Store.Get(r.Context(), k, name, from)
		if err != nil {
			return err
		}
		b, err := s.o.Store.Get(r.Context(), k, name, to)
		if err != nil {
			return err
		}
		d := unifiedDiff(fmt.Sprintf("%s@%d", target(k, name), from), fmt.Sprintf("%s@%d", target(k, name), to),
			diffText(k, a.Body), diffText(k, b.Body))
		return writeJSON(w, http.StatusOK, diffReply{From: from, To: to, Diff: d})
	}
}

type diffReply struct {
	From int    `json:"from"`
	To   int    `json:"to"`
	Diff string `json:"diff"`
}

// diffText is what a diff compares: a template's text, or a definition pretty-printed with one
// field a line.
func diffText(k store.Kind, body []byte) string {
	if k == store.KindTemplate {
		if t := gjson.GetBytes(body, "text"); t.Type == gjson.String {
			return t.String()
		}
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, body, "", "  "); err != nil {
		return string(body)
	}
	buf.WriteByte('\n')
	return buf.String()
}
