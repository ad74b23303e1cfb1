// Package metrics defines promptgate's Prometheus metrics: requests by protocol, route and status;
// the proxy's own overhead and the upstream's time as separate histograms; tools removed and calls
// blocked by reason; context truncations; plugin latency and errors; the audit sinks' written,
// dropped and failed events; the active definition versions; what versions in shadow judged and
// decided otherwise. It owns the names and the registry; the stages report into it through small
// methods, and the admin listener serves it.
package metrics

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/promptgate/promptgate/policy/audit"
)

// Version is one active definition, for the info metric.
type Version struct {
	Kind, Name string
	Version    int
}

// Metrics holds every collector. A nil *Metrics is valid and records nothing.
type Metrics struct {
	reg                *prometheus.Registry
	requests           *prometheus.CounterVec
	overhead           *prometheus.HistogramVec
	upstream           *prometheus.HistogramVec
	toolsRemoved       *prometheus.CounterVec
	callsBlocked       *prometheus.CounterVec
	flowDecisions      *prometheus.CounterVec
	mcpDecisions       *prometheus.CounterVec
	shadowDifferences  *prometheus.CounterVec
	shadowJudged       *prometheus.CounterVec
	shadowPromptChars  *prometheus.CounterVec
	contextTruncations prometheus.Counter
	pluginLatency      *prometheus.HistogramVec
	pluginErrors       *prometheus.CounterVec
	audit              *auditCollector
}

// latencyBuckets span 50µs to 60s, for both the proxy's overhead and the upstream's time.
var latencyBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New registers every metric, plus Go runtime and process collectors. versions, when not nil, is
// asked at every scrape for the active definitions (promptgate_definition_info).
func New(versions func() []Version) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), audit: newAuditCollector()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptgate_requests_total", Help: "Requests answered, by protocol, route (chat, passthrough) and HTTP status.",
	}, []string{"protocol", "route", "status"})
	m.overhead = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "promptgate_proxy_overhead_seconds", Help: "Time spent in promptgate itself before the request went upstream (read, validate, route, gather, assemble).",
		Buckets: latencyBuckets,
	}, []string{"route"})
	m.upstream = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "promptgate_upstream_seconds", Help: "Time from sending the request upstream to its response headers.",
		Buckets: latencyBuckets,
	}, []string{"route"})
	m.toolsRemoved = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptgate_tools_removed_total", Help: "Tools removed from requests, by reason.",
	}, []string{"reason"})
	m.callsBlocked = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptgate_tool_calls_blocked_total", Help: "Tool calls blocked (or audited) in responses, by verdict and reason.",
	}, []string{"verdict", "reason"})
	m.flowDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptgate_flow_decisions_total", Help: "Information-flow decisions on tool calls, by kind (provenance, flow, budget, confirm) and verdict (blocked, held, confirmed, expired, reused, audited).",
	}, []string{"kind", "verdict"})
	m.mcpDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptgate_mcp_decisions_total", Help: "MCP door decisions, by kind (mcp_call, mcp_list, mcp_definition) and verdict (allowed, blocked, held, confirmed, audited, removed, pinned, changed, flagged, approved, other).",
	}, []string{"kind", "verdict"})
	m.shadowDifferences = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptgate_shadow_differences_total", Help: "Decisions the protocol version in shadow takes otherwise than the active one (tools, requests, calls), by the active and the shadow verdict (allowed, blocked, held, confirmed, audited, removed, other).",
	}, []string{"active_verdict", "shadow_verdict"})
	m.shadowJudged = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptgate_shadow_judged_total", Help: "Requests and calls a protocol version in shadow judged beside the active one, by kind (request, call).",
	}, []string{"kind"})
	m.shadowPromptChars = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptgate_shadow_prompt_chars_total", Help: "Characters of the layered prompt of the requests a version in shadow judged, as the active version built it and as the shadow would (version: active, shadow).",
	}, []string{"version"})
	m.contextTruncations = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "promptgate_context_truncations_total", Help: "Requests whose runtime context JSON was shortened to fit its budget.",
	})
	m.pluginLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "promptgate_plugin_seconds", Help: "Context source call latency (cache hits excluded).", Buckets: latencyBuckets,
	}, []string{"source"})
	m.pluginErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promptgate_plugin_errors_total", Help: "Context source failures, by source and reason class (timeout, unavailable, canceled, error, too_large, bad_answer).",
	}, []string{"source", "reason"})
	m.reg.MustRegister(m.requests, m.overhead, m.upstream, m.toolsRemoved, m.callsBlocked, m.flowDecisions, m.mcpDecisions,
		m.shadowDifferences, m.shadowJudged, m.shadowPromptChars, m.contextTruncations,
		m.pluginLatency, m.pluginErrors, m.audit,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if versions != nil {
		m.reg.MustRegister(&infoCollector{versions: versions, desc: prometheus.NewDesc(
			"promptgate_definition_info", "The active version of each template and protocol (value 1).",
			[]string{"kind", "name", "version"}, nil)})
	}
	return m
}

// LearnDropped registers promptgate_learn_calls_dropped_total: the calls learn mode dropped because
// its queue was full (dropped is asked at every scrape). Call it once.
func (m *Metrics) LearnDropped(dropped func() uint64) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "promptgate_learn_calls_dropped_total",
		Help: "Calls learn mode did not read because its queue was full (in calls or bytes)."}, func() float64 { return float64(dropped()) }))
}

// StoreConnected registers promptgate_store_connected: 1 while the definition store is reachable
// (always for the bbolt file), 0 while a fleet store (etcd) is not and the last snapshot is served.
// connected is asked at every scrape. Call it once.
func (m *Metrics) StoreConnected(connected func() bool) {
	m.flag("promptgate_store_connected", "1 while the definition store is reachable, 0 while the last snapshot is served (etcd unreachable).", connected)
}

// DefinitionsStale registers promptgate_definitions_stale: 1 while the last reload of the
// definitions failed and the previous snapshot is served (it is retried), else 0. stale is asked at
// every scrape. Call it once.
func (m *Metrics) DefinitionsStale(stale func() bool) {
	m.flag("promptgate_definitions_stale", "1 while the definitions could not be reloaded after a change and the previous snapshot is served (retried with backoff).", stale)
}

// flag registers a gauge that is 1 while on() holds, else 0, asked at every scrape.
func (m *Metrics) flag(name, help string, on func() bool) {
	if m == nil {
		return
	}
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
		if on() {
			return 1
		}
		return 0
	}))
}

// Registry is the registry, for tests and for other packages' collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Request counts one answered request.
func (m *Metrics) Request(protocol, route string, status int) {
	if m == nil {
		return
	}
	if protocol == "" {
		protocol = "none"
	}
	m.requests.WithLabelValues(protocol, route, statusLabel(status)).Inc()
}

// statusLabel is strconv.Itoa(status), without an allocation for the statuses a proxy answers
// most.
func statusLabel(status int) string {
	switch status {
	case 200:
		return "200"
	case 400:
		return "400"
	case 401:
		return "401"
	case 403:
		return "403"
	case 404:
		return "404"
	case 429:
		return "429"
	case 499:
		return "499"
	case 500:
		return "500"
	case 502:
		return "502"
	case 503:
		return "503"
	case 504:
		return "504"
	}
	return strconv.Itoa(status)
}

// Route is one rewritten route's histograms, their labels resolved once: a request observes them
// without looking its route up. A nil *Route records nothing.
type Route struct{ overhead, upstream prometheus.Observer }

// Route resolves the histograms of one route (nil when m is nil). Call it once per route, not per
// request.
func (m *Metrics) Route(route string) *Route {
	if m == nil {
		return nil
	}
	return &Route{overhead: m.overhead.WithLabelValues(route), upstream: m.upstream.WithLabelValues(route)}
}

// Overhead observes promptgate's own time for one request.
func (r *Route) Overhead(d time.Duration) {
	if r != nil {
		r.overhead.Observe(d.Seconds())
	}
}

// Upstream observes the upstream's time to response headers.
func (r *Route) Upstream(d time.Duration) {
	if r != nil {
		r.upstream.Observe(d.Seconds())
	}
}

// ContextTruncated counts one truncated runtime context.
func (m *Metrics) ContextTruncated() {
	if m != nil {
		m.contextTruncations.Inc()
	}
}

// Plugin observes one context source call (a plugins.Observer). source is a plugin entry's name
// from the config; class is "" on success, else one of the plugins package's fixed Class constants,
// never the plugin's own message.
func (m *Metrics) Plugin(source string, d time.Duration, class string) {
	if m == nil {
		return
	}
	m.pluginLatency.WithLabelValues(source).Observe(d.Seconds())
	if class != "" {
		m.pluginErrors.WithLabelValues(source, class).Inc()
	}
}

// Record counts policy decisions: it is an audit.Recorder, so it sees exactly what the decision log
// sees.
func (m *Metrics) Record(_ context.Context, e audit.Event) {
	if m == nil {
		return
	}
	switch {
	case e.Kind == audit.KindToolRemoved:
		m.toolsRemoved.WithLabelValues(audit.ReasonHead(e.Reason)).Inc()
	case e.Kind == audit.KindToolCall && e.Verdict != audit.VerdictAllowed:
		m.callsBlocked.WithLabelValues(e.Verdict, audit.ReasonHead(e.Reason)).Inc()
	case slices.Contains(mcpKinds, e.Kind):
		verdict := e.Verdict
		if !slices.Contains(mcpVerdicts, verdict) {
			verdict = "other"
		}
		m.mcpDecisions.WithLabelValues(e.Kind, verdict).Inc()
	case e.Kind == audit.KindShadow:
		m.shadowDifferences.WithLabelValues(shadowVerdict(e.ActiveVerdict), shadowVerdict(e.Verdict)).Inc()
	case slices.Contains(flowKinds, e.Kind):
		verdict := e.Verdict
		if !slices.Contains(flowVerdicts, verdict) {
			verdict = "other"
		}
		m.flowDecisions.WithLabelValues(e.Kind, verdict).Inc()
	}
}

// shadowVerdicts are the verdict labels of promptgate_shadow_differences_total (another counts as
// "other").
var shadowVerdicts = []string{audit.VerdictAllowed, audit.VerdictBlocked, audit.VerdictHeld, audit.VerdictConfirmed,
	audit.VerdictAudited, audit.VerdictRemoved}

func shadowVerdict(v string) string {
	if slices.Contains(shadowVerdicts, v) {
		return v
	}
	return "other"
}

// ShadowRequest counts a request a version in shadow judged, and the characters of the prompt each
// version built (the active) or would build (the shadow).
func (m *Metrics) ShadowRequest(activeChars, shadowChars int) {
	if m == nil {
		return
	}
	m.shadowJudged.WithLabelValues("request").Inc()
	m.shadowPromptChars.WithLabelValues("active").Add(float64(activeChars))
	m.shadowPromptChars.WithLabelValues("shadow").Add(float64(shadowChars))
}

// ShadowCall counts a call a version in shadow judged.
func (m *Metrics) ShadowCall() {
	if m != nil {
		m.shadowJudged.WithLabelValues("call").Inc()
	}
}

// mcpKinds and mcpVerdicts are the label values of promptgate_mcp_decisions_total (a verdict
// outside the list counts as "other").
var (
	mcpKinds    = []string{audit.KindMCPCall, audit.KindMCPList, audit.KindMCPDefinition}
	mcpVerdicts = []string{audit.VerdictAllowed, audit.VerdictBlocked, audit.VerdictHeld, audit.VerdictConfirmed, audit.VerdictAudited,
		audit.VerdictRemoved, "pinned", "changed", "flagged", "approved"}
)

// flowKinds and flowVerdicts are the label values of promptgate_flow_decisions_total (a verdict
// outside the list counts as "other").
var (
	flowKinds    = []string{audit.KindProvenance, audit.KindFlow, audit.KindBudget, audit.KindConfirm}
	flowVerdicts = []string{audit.VerdictBlocked, audit.VerdictHeld, audit.VerdictConfirmed, audit.VerdictExpired,
		audit.VerdictReused, audit.VerdictAudited}
)

var _ audit.Recorder = (*Metrics)(nil)

// infoCollector reports the active versions at scrape time.
type infoCollector struct {
	versions func() []Version
	desc     *prometheus.Desc
}

func (c *infoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *infoCollector) Collect(ch chan<- prometheus.Metric) {
	vs := c.versions()
	sort.Slice(vs, func(i, j int) bool {
		if vs[i].Kind != vs[j].Kind {
			return vs[i].Kind < vs[j].Kind
		}
		return vs[i].Name < vs[j].Name
	})
	for _, v := range vs {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, v.Kind, v.Name, strconv.Itoa(v.Version))
	}
}

// AuditSink reports, at scrape time, what became of the events given to one audit sink (sink is a
// label: "ring", "file"): promptgate_audit_events_total by outcome written, dropped (buffer full)
// or failed (a write error such as a full disk), and promptgate_audit_write_errors_total. A growing
// failed count is how an operator learns that decisions are no longer kept, while requests keep
// being served.
func (m *Metrics) AuditSink(sink string, stats func() audit.Stats) {
	if m == nil || stats == nil {
		return
	}
	m.audit.mu.Lock()
	defer m.audit.mu.Unlock()
	m.audit.sinks = append(m.audit.sinks, auditSink{name: sink, stats: stats})
}

// auditCollector reports the counts of every audit sink given to AuditSink.
type auditCollector struct {
	mu             sync.Mutex
	sinks          []auditSink
	events, errors *prometheus.Desc
}

type auditSink struct {
	name  string
	stats func() audit.Stats
}

func newAuditCollector() *auditCollector {
	return &auditCollector{
		events: prometheus.NewDesc("promptgate_audit_events_total", "Audit events by sink and outcome (written, dropped: buffer full, failed: write error).", []string{"sink", "outcome"}, nil),
		errors: prometheus.NewDesc("promptgate_audit_write_errors_total", "Failed writes of an audit sink (each loses one batch of events).", []string{"sink"}, nil),
	}
}

func (c *auditCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.events; ch <- c.errors }

func (c *auditCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sinks := slices.Clone(c.sinks)
	c.mu.Unlock()
	for _, k := range sinks {
		s := k.stats()
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(s.Written), k.name, "written")
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(s.Dropped), k.name, "dropped")
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(s.Failed), k.name, "failed")
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(s.WriteErrors), k.name)
	}
}
