package admin

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/learn"
	"github.com/promptgate/promptgate/store"
)

// DefaultSince is the window of the learned data and of a suggestion when none is given.
const DefaultSince = 24 * time.Hour

// shadowReply is the answer of a change of a protocol's shadow.
type shadowReply struct {
	Name string `json:"name"`
	// Shadow is the version in shadow now (0: none); Previous the one before the change.
	Shadow   int `json:"shadow"`
	Previous int `json:"previous"`
}

// POST /admin/protocols/{name}/shadow {"version":N} → {"name","shadow":N,"previous":M}: version N
// judges every request routed to the protocol beside the active one, for the record only.
func (s *server) setShadow(w http.ResponseWriter, r *http.Request) error {
	who, body, err := change(w, r)
	if err != nil {
		return err
	}
	var req activateBody
	if err := decodeStrict(body, &req, "version"); err != nil {
		return err
	}
	if req.Version == nil || *req.Version < 1 {
		return badRequest("invalid_request", "version", `version: required, a version number (1 or more), e.g. {"version":2}; DELETE the shadow to take it away`)
	}
	return s.moveShadow(w, r, who, *req.Version)
}

// DELETE /admin/protocols/{name}/shadow → {"name","shadow":0,"previous":M}; 404 when none is in
// shadow.
func (s *server) clearShadow(w http.ResponseWriter, r *http.Request) error {
	who, body, err := change(w, r)
	if err != nil {
		return err
	}
	if err := decodeStrict(body, &struct{}{}); err != nil {
		return err
	}
	return s.moveShadow(w, r, who, 0)
}

func (s *server) moveShadow(w http.ResponseWriter, r *http.Request, who string, v int) error {
	name := r.PathValue("name")
	prev, err := s.o.Store.SetShadow(r.Context(), name, v)
	if err != nil {
		return err
	}
	e := changeEvent(store.KindProtocol, audit.KindShadowChanged, name, v, who)
	e.Reason = fmt.Sprintf("previously in shadow: %d", prev)
	if v == 0 {
		e.Reason = fmt.Sprintf("taken out of shadow: %d", prev)
	}
	s.record(r, e)
	return writeJSON(w, http.StatusOK, shadowReply{Name: name, Shadow: v, Previous: prev})
}

// shadowSummary is the answer of GET /admin/shadow: the versions in shadow, and what they would
// change.
type shadowSummary struct {
	Window string    `json:"window"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	// Covered is false when the audit ring holds fewer events than the window.
	Covered bool            `json:"covered"`
	Shadows []shadowOfProto `json:"shadows"`
	// Changes are the differences of the window, counted by protocol, version in shadow, tool,
	// verdicts and rule, most frequent first.
	Changes []shadowChange `json:"changes"`
}

type shadowOfProto struct {
	Protocol string `json:"protocol"`
	Active   int    `json:"active"`
	Shadow   int    `json:"shadow"`
}

type shadowChange struct {
	Protocol      string `json:"protocol"`
	ShadowVersion int    `json:"shadowVersion"`
	Tool          string `json:"tool"`
	ActiveVerdict string `json:"activeVerdict"`
	ShadowVerdict string `json:"shadowVerdict"`
	Rule          string `json:"rule"`
	Reason        string `json:"reason"`
	Count         int    `json:"count"`
	// Requests are the ids of the latest requests it happened in (at most 3).
	Requests []string `json:"requests"`
}

// GET /admin/shadow?window=1h|24h&protocol=ID → the protocols with a version in shadow, and the
// shadow events of the window counted by what would change.
func (s *server) shadowSummary(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "window", "protocol")
	if err != nil {
		return err
	}
	name := q.Get("window")
	if name == "" {
		name = "24h"
	}
	win, ok := summaryWindows[name]
	if !ok {
		return badRequest("invalid_request", "window", "window %q: want 1h or 24h", name)
	}
	protocol := q.Get("protocol")
	entries, err := s.o.Store.List(r.Context(), store.KindProtocol)
	if err != nil {
		return err
	}
	until := time.Now().UTC()
	out := shadowSummary{Window: name, Since: until.Add(-win.span), Until: until, Shadows: []shadowOfProto{}, Changes: []shadowChange{}, Covered: true}
	for _, e := range entries {
		if e.Shadow != 0 && (protocol == "" || e.Name == protocol) {
			out.Shadows = append(out.Shadows, shadowOfProto{Protocol: e.Name, Active: e.Active, Shadow: e.Shadow})
		}
	}
	if s.o.Audit == nil {
		return writeJSON(w, http.StatusOK, out)
	}
	s.flushAudit(r.Context())
	type key struct {
		protocol, tool, active, shadow, rule, reason string
		version                                      int
	}
	counts := map[key]*shadowChange{}
	out.Covered, err = s.o.Audit.Scan(r.Context(), out.Since, func(e audit.Event) bool {
		if e.Kind != audit.KindShadow || protocol != "" && e.Protocol != protocol {
			return true
		}
		k := key{e.Protocol, e.Tool, e.ActiveVerdict, e.Verdict, e.Rule, audit.ReasonHead(e.Reason), e.ShadowVersion}
		c := counts[k]
		if c == nil {
			c = &shadowChange{Protocol: k.protocol, ShadowVersion: k.version, Tool: k.tool, ActiveVerdict: k.active,
				ShadowVerdict: k.shadow, Rule: k.rule, Reason: k.reason, Requests: []string{}}
			counts[k] = c
		}
		c.Count++
		if len(c.Requests) < 3 && !slices.Contains(c.Requests, e.RequestID) { // newest first
			c.Requests = append(c.Requests, e.RequestID)
		}
		return true
	})
	if err != nil {
		return err
	}
	for _, c := range counts {
		out.Changes = append(out.Changes, *c)
	}
	slices.SortFunc(out.Changes, func(a, b shadowChange) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Protocol+"\x00"+a.Tool+"\x00"+a.Rule+"\x00"+a.ShadowVerdict, b.Protocol+"\x00"+b.Tool+"\x00"+b.Rule+"\x00"+b.ShadowVerdict)
	})
	return writeJSON(w, http.StatusOK, out)
}

// sinceParam reads the since parameter: a duration (24h, 90m), more than 0 and at most the learn
// store's retention; DefaultSince when absent.
func sinceParam(v string, has bool) (time.Duration, error) {
	if !has {
		return DefaultSince, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > learn.DefaultRetention {
		return 0, badRequest("invalid_request", "since", "since %q: want a duration such as 24h or 90m, more than 0 and at most %s (what learn mode keeps)",
			v, learn.DefaultRetention)
	}
	return d, nil
}

// learned reads what learn mode learned of a protocol over since; 404 learn_off when this instance
// does not learn.
func (s *server) learned(r *http.Request, protocol string, since time.Duration) (learn.Learned, error) {
	if s.o.Learn == nil {
		return learn.Learned{}, &apiError{status: http.StatusNotFound, code: "learn_off", msg: "this instance keeps no learned data (no audit ring, so no learn file)"}
	}
	return s.o.Learn.Window(r.Context(), protocol, time.Now().Add(-since))
}

// GET /admin/learn/{protocol}?since=24h → what learn mode learned of the protocol over the window:
// per tool its calls and conversations, and per argument path where its values came from and what
// was found in them.
func (s *server) learnedOf(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "since")
	if err != nil {
		return err
	}
	since, err := sinceParam(q.Get("since"), q.Has("since"))
	if err != nil {
		return err
	}
	name := r.PathValue("protocol")
	if !store.ValidName(name) {
		return &apiError{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf("protocols/%q: not a protocol name", name)}
	}
	l, err := s.learned(r, name, since)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, l)
}

// suggestReply is the answer of GET /admin/protocols/{name}/suggest.
type suggestReply struct {
	learn.Suggestion
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// Requests counts the requests learned from in the window.
	Requests   int     `json:"requests"`
	Definition rawJSON `json:"definition"`
}

// rawJSON is JSON written as it is.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// GET /admin/protocols/{name}/suggest?since=24h → a proposed version of the protocol from what
// learn mode learned of it over the window: the definition (based on the active version) and each
// proposal with its evidence. 404 when the protocol has no active version; 409 nothing_learned when
// the window is empty.
func (s *server) suggest(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "since")
	if err != nil {
		return err
	}
	since, err := sinceParam(q.Get("since"), q.Has("since"))
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	rec, err := s.o.Store.Active(r.Context(), store.KindProtocol, name)
	if err != nil {
		return err
	}
	l, err := s.learned(r, name, since)
	if err != nil {
		return err
	}
	sg, err := learn.Suggest(rec.Body, rec.Version, l, learn.SuggestOptions{})
	if err != nil {
		if l.Requests == 0 {
			return &apiError{status: http.StatusConflict, code: "nothing_learned", msg: strings.TrimPrefix(err.Error(), "learn: ")}
		}
		return err
	}
	return writeJSON(w, http.StatusOK, suggestReply{Suggestion: sg, Since: l.Since, Until: l.Until, Requests: l.Requests, Definition: sg.Definition})
}
