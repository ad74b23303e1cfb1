package toolseen

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/proxy"
)

func tools(names ...string) []policy.Tool {
	out := make([]policy.Tool, len(names))
	for i, n := range names {
		out[i] = policy.Tool{Name: n}
	}
	return out
}

func TestSawCountsAndKeepsTheLastDecision(t *testing.T) {
	t.Parallel()
	m := New(10)
	clock := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	m.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	m.Saw("tech", tools("web_fetch", "search_docs"), nil)
	m.Saw("public", tools("search_docs"), []policy.Removal{{Name: "web_fetch", Reason: policy.ReasonDisabled}})
	got := m.List()
	if len(got) != 2 {
		t.Fatalf("%+v", got)
	}
	// Both were seen last at the same time: by name.
	sd, wf := got[0], got[1]
	if sd.Name != "search_docs" || sd.Requests != 2 || sd.Removed != 0 || !sd.LastKept || sd.LastProtocol != "public" || sd.LastReason != "" {
		t.Errorf("search_docs %+v", sd)
	}
	if wf.Name != "web_fetch" || wf.Requests != 2 || wf.Removed != 1 || wf.LastKept || wf.LastReason != policy.ReasonDisabled ||
		!wf.LastSeen.Equal(clock) {
		t.Errorf("web_fetch %+v", wf)
	}
	m.Saw("tech", tools("web_fetch"), nil)
	if got := m.List(); got[0].Name != "web_fetch" || !got[0].LastKept || got[0].LastReason != "" {
		t.Errorf("after a kept request: %+v", got[0])
	}
}

// A blocked call counts on the tool's sighting, without making it the most recently seen; a name no
// request declared (the model chose it) adds nothing.
func TestBlockedCallsCountedOnDeclaredTools(t *testing.T) {
	t.Parallel()
	m := New(2)
	clock := time.Date(2026, 2, 24, 10, 0, 0, 0, time.UTC)
	m.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	m.Saw("tech", tools("shell"), nil)
	m.Saw("tech", tools("web_fetch"), nil)
	m.Blocked("shell")
	m.Blocked("shell")
	last := clock
	m.Blocked("invented_by_the_model")
	got := m.List()
	if len(got) != 2 || got[0].Name != "web_fetch" || got[0].Blocked != 0 || !got[0].LastBlocked.IsZero() {
		t.Fatalf("%+v", got)
	}
	if sh := got[1]; sh.Name != "shell" || sh.Blocked != 2 || !sh.LastBlocked.Equal(last) || !sh.LastKept || sh.Requests != 1 {
		t.Errorf("shell %+v", sh)
	}
	// shell was seen least recently: a new name forgets it, blocked calls or not.
	m.Saw("tech", tools("search_docs"), nil)
	for _, s := range m.List() {
		if s.Name == "shell" {
			t.Errorf("shell kept: %+v", s)
		}
	}
	var nilMem *Memory
	nilMem.Blocked("shell")
}

func TestBoundedLeastRecentlySeenForgotten(t *testing.T) {
	t.Parallel()
	m := New(3)
	for i := range 5 {
		m.Saw("tech", tools(fmt.Sprint("t", i)), nil)
	}
	m.Saw("tech", tools("t2"), nil) // t2 is the most recent now; t3 and t4 stay, t0 and t1 are gone
	var names []string
	for _, s := range m.List() {
		names = append(names, s.Name)
	}
	if len(names) != 3 || !strings.Contains(strings.Join(names, ","), "t2") || strings.Contains(strings.Join(names, ","), "t0") ||
		strings.Contains(strings.Join(names, ","), "t1") {
		t.Fatalf("kept %v", names)
	}
}

func TestBadNamesNotRemembered(t *testing.T) {
	t.Parallel()
	m := New(0)
	m.Saw("tech", tools("", strings.Repeat("x", MaxNameBytes+1), strings.Repeat("y", MaxNameBytes)), []policy.Removal{{Name: ""}})
	if got := m.List(); len(got) != 1 || got[0].Name != strings.Repeat("y", MaxNameBytes) {
		t.Fatalf("%d sightings", len(got))
	}
	var nilMem *Memory
	nilMem.Saw("tech", tools("a"), nil)
	if got := nilMem.List(); got == nil || len(got) != 0 {
		t.Fatalf("nil memory lists %v", got)
	}
}

func TestConcurrentSaw(t *testing.T) {
	t.Parallel()
	m := New(50)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				m.Saw("tech", tools(fmt.Sprint("t", (g*200+i)%80)), nil)
				_ = m.List()
			}
		})
	}
	wg.Wait()
	var total uint64
	for _, s := range m.List() {
		total += s.Requests
	}
	if n := len(m.List()); n != 50 || total > 1600 {
		t.Fatalf("%d names, %d requests", n, total)
	}
}

var _ proxy.ToolWatcher = (*Memory)(nil)

// The cost the proxy pays per request: three declared tools, requests in parallel.
func BenchmarkSaw(b *testing.B) {
	m := New(0)
	kept := tools("web_fetch", "search_docs")
	removed := []policy.Removal{{Name: "shell", Reason: policy.ReasonDisabled}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Saw("tech", kept, removed)
		}
	})
}
