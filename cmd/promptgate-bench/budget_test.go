package main

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/surface/chat"
	"github.com/promptgate/promptgate/proxy/surface/messages"
	"github.com/promptgate/promptgate/proxy/surface/responses"
)

// Allocation budgets per stage, counted (never timed): a change that makes a stage allocate more
// than its budget fails here and must say why in docs/performance.md. Each budget is what the stage
// allocates now plus a small margin; the bare proxy's count is given beside it in the message.
// The counts are those of a build without the race detector (which changes what sync.Pool keeps).

// handlerBudgets are the allocations of one whole request through promptgate's handler
// (BenchmarkHandler), this harness's own request and upstream answer included, its decisions logged
// on its goroutine (newPromptgateAudit): the audit ring's and the log queue's writers allocate per
// batch, on their own goroutines, as the clock has them commit.
var handlerBudgets = map[string]float64{
	wlSmall:      89,
	wlChat2K:     103,
	wlStreamTool: 177,
	wlMessages:   171,
	wlResponses:  198,
}

func TestAllocBudgetsHandler(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	ip := newInProcess(t, false)
	for _, w := range handlerWorkloads() {
		budget, ok := handlerBudgets[w.Name]
		if !ok {
			t.Fatalf("no budget for workload %s", w.Name)
		}
		dw := &discardWriter{h: http.Header{}}
		serve(t, ip.promptgate, w, dw) // caches, the frame, the schemas: what every later request finds
		got := testing.AllocsPerRun(50, func() { serve(t, ip.promptgate, w, dw) })
		bare := testing.AllocsPerRun(50, func() { serve(t, ip.baseline, w, dw) })
		t.Logf("%s: %.0f allocations per request (bare proxy %.0f), budget %.0f", w.Name, got, bare, budget)
		if got > budget {
			t.Errorf("%s: %.0f allocations per request, over its budget of %.0f (the bare proxy makes %.0f)", w.Name, got, budget, bare)
		}
	}
}

// TestAllocBudgetsStages: the request side (Engine.Prepare of the 2 KB chat with three tools), the
// vetting of a non-stream answer, and each surface's stream relay over the harness's tool streams
// (the call held, vetted and released).
func TestAllocBudgetsStages(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	p, err := openPipeline(context.Background(), t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	header := http.Header{"Authorization": {"Bearer sk-bench"}, "Content-Type": {"application/json"}}
	body := chat2KBody(false)
	prepare := func() {
		if _, err := p.engine.Prepare(context.Background(), proxy.Input{Path: proxy.PathChat, Header: header, Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	prepare()
	check(t, "Prepare chat2k", testing.AllocsPerRun(50, prepare), 34)

	prep, err := p.engine.Prepare(context.Background(), proxy.Input{Path: proxy.PathChat, Header: header, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	mk := cachedChecker(t, prep)
	answer := completionJSON(DefaultRespBytes)
	vetBody := func() {
		if _, _, err := chat.Body(answer, mk(), nil); err != nil {
			t.Fatal(err)
		}
	}
	vetBody()
	check(t, "chat.Body of a text answer", testing.AllocsPerRun(50, vetBody), 6)
	buf := make([]byte, 32<<10)
	for _, s := range []struct {
		name   string
		evs    [][]byte
		open   func(io.ReadCloser) relayed
		budget float64
	}{
		{"chat stream, tool call", streamEvents(200, true), func(up io.ReadCloser) relayed { return chat.NewStream(up, mk(), nil) }, 80},
		{"messages stream, tool_use", messagesEvents(200), func(up io.ReadCloser) relayed { return messages.NewStream(up, mk(), nil) }, 66},
		{"responses stream, function call", responsesEvents(200), func(up io.ReadCloser) relayed { return responses.NewStream(up, mk(), nil) }, 87},
	} {
		run := func() {
			st := s.open(io.NopCloser(&eventReader{evs: append([][]byte(nil), s.evs...)}))
			if _, err := io.CopyBuffer(io.Discard, st, buf); err != nil {
				t.Fatal(err)
			}
		}
		run()
		check(t, s.name, testing.AllocsPerRun(50, run), s.budget)
	}
}

func check(t *testing.T, what string, got, budget float64) {
	t.Helper()
	t.Logf("%s: %.0f allocations, budget %.0f", what, got, budget)
	if got > budget {
		t.Errorf("%s: %.0f allocations, over its budget of %.0f", what, got, budget)
	}
}
