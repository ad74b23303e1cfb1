package admin

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/promptgate/promptgate/policy/audit"
)

// summaryWindows are the windows of GET /admin/audit/summary and the width of their chart buckets.
var summaryWindows = map[string]struct{ span, bucket time.Duration }{
	"1h":  {time.Hour, 5 * time.Minute},
	"24h": {24 * time.Hour, time.Hour},
}

// summaryReply is the answer of GET /admin/audit/summary.
type summaryReply struct {
	Window string    `json:"window"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
	// Covered is false when the audit ring holds fewer events than the window: its oldest are
	// newer.
	Covered bool `json:"covered"`
	// Total counts the blocked and removed decisions in the window.
	Total   int            `json:"total"`
	Reasons []reasonCount  `json:"reasons"`
	Buckets []bucketCount  `json:"buckets"`
	Filters summaryFilters `json:"filters"`
}

type reasonCount struct {
	Kind    string `json:"kind"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	Count   int    `json:"count"`
}

type bucketCount struct {
	Start time.Time `json:"start"`
	Count int       `json:"count"`
}

// summaryFilters are the values the audit filters take, for the console's menus.
type summaryFilters struct {
	Kinds    []string `json:"kinds"`
	Verdicts []string `json:"verdicts"`
}

// GET /admin/audit/summary?window=1h|24h → the blocked and removed decisions of the window counted
// by kind, verdict and reason (audit.ReasonHead), most frequent first, and by time bucket (5
// minutes over 1h, 1 hour over 24h), oldest first.
func (s *server) auditSummary(w http.ResponseWriter, r *http.Request) error {
	q, err := params(r, "window")
	if err != nil {
		return err
	}
	name := q.Get("window")
	if name == "" {
		name = "1h"
	}
	win, ok := summaryWindows[name]
	if !ok {
		return badRequest("invalid_request", "window", "window %q: want 1h or 24h", name)
	}
	until := time.Now().UTC()
	// Buckets end at the next whole bucket, so that the chart's columns keep their place between
	// polls.
	end := until.Truncate(win.bucket).Add(win.bucket)
	since := end.Add(-win.span)
	out := summaryReply{Window: name, Since: since, Until: until, Reasons: []reasonCount{},
		Filters: summaryFilters{Kinds: auditKinds(), Verdicts: auditVerdicts()}}
	n := int(win.span / win.bucket)
	out.Buckets = make([]bucketCount, n)
	for i := range out.Buckets {
		out.Buckets[i].Start = since.Add(time.Duration(i) * win.bucket)
	}
	if s.o.Audit == nil {
		out.Covered = true
		return writeJSON(w, http.StatusOK, out)
	}
	s.flushAudit(r.Context())
	type key struct{ kind, verdict, reason string }
	counts := map[key]int{}
	out.Covered, err = s.o.Audit.Scan(r.Context(), since, func(e audit.Event) bool {
		if e.Verdict != audit.VerdictBlocked && e.Verdict != audit.VerdictRemoved {
			return true
		}
		i := int(e.Time.Sub(since) / win.bucket)
		if i < 0 || i >= n {
			return true
		}
		out.Total++
		out.Buckets[i].Count++
		counts[key{e.Kind, e.Verdict, audit.ReasonHead(e.Reason)}]++
		return true
	})
	if err != nil {
		return err
	}
	for k, c := range counts {
		out.Reasons = append(out.Reasons, reasonCount{Kind: k.kind, Verdict: k.verdict, Reason: k.reason, Count: c})
	}
	slices.SortFunc(out.Reasons, func(a, b reasonCount) int {
		if a.Count != b.Count {
			return b.Count - a.Count
		}
		return strings.Compare(a.Kind+"\x00"+a.Reason, b.Kind+"\x00"+b.Reason)
	})
	return writeJSON(w, http.StatusOK, out)
}
