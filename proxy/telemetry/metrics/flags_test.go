package metrics

import (
	"strings"
	"sync/atomic"
	"testing"
)

// TestFlagGauges: the store and definitions gauges follow their conditions at every scrape.
func TestFlagGauges(t *testing.T) {
	m := New(nil)
	var connected, stale atomic.Bool
	connected.Store(true)
	m.StoreConnected(connected.Load)
	m.DefinitionsStale(stale.Load)
	want := func(lines ...string) {
		t.Helper()
		out := scrape(t, m)
		for _, l := range lines {
			if !strings.Contains(out, "\n"+l+"\n") {
				t.Errorf("no line %q in\n%s", l, out)
			}
		}
	}
	want("promptgate_store_connected 1", "promptgate_definitions_stale 0")
	connected.Store(false)
	stale.Store(true)
	want("promptgate_store_connected 0", "promptgate_definitions_stale 1")
}
