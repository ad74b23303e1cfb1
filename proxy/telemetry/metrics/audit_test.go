package metrics

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/audit"
)

func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	ts := httptest.NewServer(m.Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// A real ring: events recorded after it is closed are dropped, and the counter says how many.
func TestAuditSinkDropped(t *testing.T) {
	ring, err := audit.OpenRing(filepath.Join(t.TempDir(), "audit.db"), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := New(nil)
	m.AuditSink("ring", ring.Stats)
	ring.Record(context.Background(), audit.Event{Kind: audit.KindToolCall, Verdict: audit.VerdictAllowed})
	if err := ring.Close(); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, m)
	for _, want := range []string{`promptgate_audit_events_total{outcome="dropped",sink="ring"} 0`, `promptgate_audit_events_total{outcome="failed",sink="ring"} 0`, `promptgate_audit_write_errors_total{sink="ring"} 0`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for range 3 {
		ring.Record(context.Background(), audit.Event{Kind: audit.KindToolCall, Verdict: audit.VerdictBlocked})
	}
	if got := ring.Stats().Dropped; got != 3 {
		t.Fatalf("ring dropped %d, want 3", got)
	}
	if text := scrape(t, m); !strings.Contains(text, `promptgate_audit_events_total{outcome="dropped",sink="ring"} 3`) {
		t.Errorf("dropped events not reported:\n%s", text)
	}
	var nilM *Metrics
	nilM.AuditSink("ring", ring.Stats) // a nil *Metrics records nothing
}
