package admin

import (
	"math"
	"net/http"
	"sort"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/promptgate/promptgate/plugins"
	"github.com/promptgate/promptgate/policy/audit"
)

// Metric names GET /admin/health reads (package proxy/telemetry/metrics defines them).
const (
	metricRequests   = "promptgate_requests_total"
	metricOverhead   = "promptgate_proxy_overhead_seconds"
	metricPluginTime = "promptgate_plugin_seconds"
	metricPluginErrs = "promptgate_plugin_errors_total"
	metricDefinition = "promptgate_definition_info"
)

// healthReply is the answer of GET /admin/health.
type healthReply struct {
	Time    time.Time      `json:"time"`
	Store   storeHealth    `json:"store"`
	Served  []servedDef    `json:"served"`
	Plugins []pluginHealth `json:"plugins"`
	// Requests counts the requests answered since the start, by HTTP status; a rate is the
	// difference of two reports over their time.
	Requests requestsHealth `json:"requests"`
	// Overhead is promptgate's own time per request since the start, from its histogram (seconds).
	Overhead latency      `json:"overhead"`
	Audit    *audit.Stats `json:"audit,omitempty"`
}

type storeHealth struct {
	// Backend is "bbolt" or "etcd"; Endpoints and Prefix are an etcd store's.
	Backend   string `json:"backend"`
	Endpoints string `json:"endpoints,omitempty"`
	Prefix    string `json:"prefix,omitempty"`
	// Connected is false while a fleet store is unreachable (the last snapshot is served), with
	// Reason.
	Connected bool   `json:"connected"`
	Reason    string `json:"reason,omitempty"`
	// Stale says why the definitions served are not the store's latest, "" while they are.
	Stale string `json:"stale"`
}

// servedDef is one definition the proxy serves now (from promptgate_definition_info).
type servedDef struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Version int    `json:"version"`
}

type pluginHealth struct {
	plugins.SourceStatus
	// Calls counts the calls made (cache hits excluded) and Latency their time; Errors the failed
	// ones by reason (timeout, unavailable, error, ...).
	Calls   uint64            `json:"calls"`
	Latency latency           `json:"latency"`
	Errors  map[string]uint64 `json:"errors"`
}

type requestsHealth struct {
	Total    uint64            `json:"total"`
	ByStatus map[string]uint64 `json:"byStatus"`
}

// latency is a histogram's count and its estimated median and 99th percentile (seconds; 0 without
// observations), interpolated within buckets as Prometheus's histogram_quantile does.
type latency struct {
	Count uint64  `json:"count"`
	P50   float64 `json:"p50Seconds"`
	P99   float64 `json:"p99Seconds"`
}

// GET /admin/health → the store's state, the definitions served, the context sources, request
// counts, the proxy's overhead and the audit ring's counts. Fleet members are not listed: the store
// does not track the instances that share it.
func (s *server) health(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	out := healthReply{Time: time.Now().UTC(), Served: []servedDef{}, Plugins: []pluginHealth{},
		Requests: requestsHealth{ByStatus: map[string]uint64{}}}
	out.Store = storeHealth{Backend: "bbolt", Connected: true}
	if e, ok := s.o.Store.(interface {
		Endpoints() string
		Prefix() string
	}); ok {
		out.Store.Backend, out.Store.Endpoints, out.Store.Prefix = "etcd", e.Endpoints(), e.Prefix()
	}
	if c, ok := s.o.Store.(interface{ Connected() (bool, string) }); ok {
		out.Store.Connected, out.Store.Reason = c.Connected()
	}
	if s.o.Stale != nil {
		out.Store.Stale = s.o.Stale()
	}
	if s.o.Audit != nil {
		st := s.o.Audit.Stats()
		out.Audit = &st
	}
	families := map[string]*dto.MetricFamily{}
	if s.o.Gatherer != nil {
		mfs, err := s.o.Gatherer.Gather()
		if err != nil {
			s.log.Warn("admin: health: some metrics could not be gathered", "err", err)
		}
		for _, mf := range mfs {
			families[mf.GetName()] = mf
		}
	}
	for _, m := range families[metricDefinition].GetMetric() {
		l := labels(m)
		v, _ := strconv.Atoi(l["version"])
		out.Served = append(out.Served, servedDef{Kind: l["kind"], Name: l["name"], Version: v})
	}
	for _, m := range families[metricRequests].GetMetric() {
		n := uint64(m.GetCounter().GetValue())
		out.Requests.Total += n
		out.Requests.ByStatus[labels(m)["status"]] += n
	}
	out.Overhead = histogram(families[metricOverhead].GetMetric())
	if s.o.Plugins != nil {
		for _, st := range s.o.Plugins() {
			p := pluginHealth{SourceStatus: st, Errors: map[string]uint64{}}
			var mine []*dto.Metric
			for _, m := range families[metricPluginTime].GetMetric() {
				if labels(m)["source"] == st.Name {
					mine = append(mine, m)
				}
			}
			p.Latency = histogram(mine)
			p.Calls = p.Latency.Count
			for _, m := range families[metricPluginErrs].GetMetric() {
				if l := labels(m); l["source"] == st.Name {
					p.Errors[l["reason"]] += uint64(m.GetCounter().GetValue())
				}
			}
			out.Plugins = append(out.Plugins, p)
		}
	}
	return writeJSON(w, http.StatusOK, out)
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// histogram merges the series of one histogram (same buckets, any labels) and estimates its
// quantiles.
func histogram(ms []*dto.Metric) latency {
	type bucket struct {
		upper float64
		count uint64
	}
	byUpper := map[float64]uint64{}
	var total uint64
	for _, m := range ms {
		h := m.GetHistogram()
		if h == nil {
			continue
		}
		total += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			byUpper[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	bs := make([]bucket, 0, len(byUpper))
	for u, c := range byUpper {
		bs = append(bs, bucket{u, c})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].upper < bs[j].upper })
	quantile := func(q float64) float64 {
		if total == 0 || len(bs) == 0 {
			return 0
		}
		rank := q * float64(total)
		lower, below := 0.0, uint64(0)
		for _, b := range bs {
			if float64(b.count) >= rank {
				if math.IsInf(b.upper, 1) || b.count == below {
					return lower
				}
				return lower + (b.upper-lower)*(rank-float64(below))/float64(b.count-below)
			}
			lower, below = b.upper, b.count
		}
		// Above every finite bucket: the highest bound is the best estimate.
		return lower
	}
	return latency{Count: total, P50: quantile(0.5), P99: quantile(0.99)}
}
