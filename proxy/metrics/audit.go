package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/promptgate/promptgate/policy/audit"
)

// AuditStats is a recorder that counts what became of its events: audit.Ring and audit.JSONL.
type AuditStats interface {
	Stats() audit.Stats
}

// WatchAudit reports, at every scrape, the events a decision-log recorder dropped because its buffer was
// full (promptgate_audit_events_dropped_total) and lost to write errors (promptgate_audit_events_failed_total),
// labelled recorder=name ("ring", "jsonl"). Both only grow, so they are counters. Call it once per name.
func (m *Metrics) WatchAudit(name string, r AuditStats) {
	if m == nil || r == nil {
		return
	}
	m.reg.MustRegister(&auditCollector{name: name, r: r})
}

var (
	auditDroppedDesc = prometheus.NewDesc("promptgate_audit_events_dropped_total",
		"Decision-log events dropped because the recorder's buffer was full (or it was closed), by recorder.", []string{"recorder"}, nil)
	auditFailedDesc = prometheus.NewDesc("promptgate_audit_events_failed_total",
		"Decision-log events lost to write errors (full disk, read-only file system, ...), by recorder.", []string{"recorder"}, nil)
)

// auditCollector reads a recorder's counts at scrape time.
type auditCollector struct {
	name string
	r    AuditStats
}

func (c *auditCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- auditDroppedDesc
	ch <- auditFailedDesc
}

func (c *auditCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.r.Stats()
	ch <- prometheus.MustNewConstMetric(auditDroppedDesc, prometheus.CounterValue, float64(s.Dropped), c.name)
	ch <- prometheus.MustNewConstMetric(auditFailedDesc, prometheus.CounterValue, float64(s.Failed), c.name)
}
