package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be the harness's child processes too (servers and plugins), as the
// harness binary is.
func TestMain(m *testing.M) {
	if handled, err := runChildRole(); handled {
		if err != nil {
			fmt.Fprintln(os.Stderr, "promptgate-bench child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestQuick runs the whole harness once in --quick mode, so that it cannot rot: every server
// starts, promptgate's pipeline passes the check on every workload, every phase answers without
// errors, and the report has its ratios and its JSON.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several processes; skipped in -short mode")
	}
	args := []string{"--quick", "--json", filepath.Join(t.TempDir(), "bench.json")}
	if raceEnabled {
		// The race detector slows every process of the run several times: a smaller pass.
		args = append(args, "--workloads", "chat8k,stream-tool,plugins1,messages-tool,responses-tool")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	if err := run(ctx, args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Logf("quick pass in %s\n%s", time.Since(start).Round(time.Millisecond), stdout.String())
	for _, want := range []string{"p50 ratio", "throughput ratio", "chat8k", "stream-tool"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the table lacks %q", want)
		}
	}
	raw, err := os.ReadFile(args[2])
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	wantWorkloads := len(workloadNames())
	if raceEnabled {
		wantWorkloads = 5
	}
	if !pluginsAvailable {
		wantWorkloads -= 2
		if rep.Plugins.Enabled || rep.Plugins.Note == "" {
			t.Errorf("plugins: %+v; want off with a note", rep.Plugins)
		}
	}
	if len(rep.Workloads) != wantWorkloads {
		t.Fatalf("%d workloads in the report, want %d", len(rep.Workloads), wantWorkloads)
	}
	for _, w := range rep.Workloads {
		if len(w.Results) != len(allModes)*len(targets) {
			t.Errorf("%s: %d results, want %d", w.Name, len(w.Results), len(allModes)*len(targets))
		}
		for _, r := range w.Results {
			if r.Requests == 0 || r.Errors > 0 || r.P50Ms <= 0 || r.Throughput <= 0 {
				t.Errorf("%s %s %s: %d requests, %d errors (%s), p50 %v, %v req/s", w.Name, r.Mode, r.Target, r.Requests, r.Errors, r.FirstErr, r.P50Ms, r.Throughput)
			}
			if r.Target != targetDirect && r.AllocsPerReq <= 0 {
				t.Errorf("%s %s %s: no server allocations measured", w.Name, r.Mode, r.Target)
			}
			if w.Stream && r.TTFBP50Ms <= 0 {
				t.Errorf("%s %s %s: no time to first byte", w.Name, r.Mode, r.Target)
			}
		}
		if w.Overhead == nil || w.Overhead.ThroughputRatio == nil || len(w.Overhead.Goals) < 3 {
			t.Errorf("%s: overhead %+v", w.Name, w.Overhead)
		}
	}
}

// TestFlags checks that bad settings are all reported, each naming its flag.
func TestFlags(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseFlags([]string{"--rate", "0", "--conns", "0", "--workloads", "nope", "--chunks", "3", "--concurrency", "0",
		"--modes", "rate,fixed", "--trace", "x"}, &stderr)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--rate", "--conns", "--workloads", `"nope"`, "--chunks", "--concurrency", `"fixed"`, "--trace", "--timeline N"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	c, err := parseFlags([]string{"--quick"}, &stderr)
	if err != nil || c.Duration > time.Second || c.Repeat != 1 {
		t.Errorf("--quick: %+v, %v", c, err)
	}
}

// TestStreamEvents checks the fake upstream's streams: exactly n chunks plus [DONE], the tool call
// whole.
func TestStreamEvents(t *testing.T) {
	for _, tool := range []bool{false, true} {
		evs := streamEvents(200, tool)
		if len(evs) != 201 || string(evs[200]) != "data: [DONE]\n\n" {
			t.Fatalf("tool %v: %d events, last %q", tool, len(evs), evs[len(evs)-1])
		}
		all := string(bytes.Join(evs, nil))
		if tool != strings.Contains(all, `"name":"get_ticket"`) || tool != strings.Contains(all, `"finish_reason":"tool_calls"`) {
			t.Errorf("tool %v: stream is\n%.400s", tool, all)
		}
	}
	if n := len(completionJSON(1024)); n < 1000 || n > 1100 {
		t.Errorf("completion of %d bytes, want about 1024", n)
	}
	for _, w := range workloads() {
		if !json.Valid(w.Body) {
			t.Errorf("%s: body is not JSON", w.Name)
		}
	}
	if n := len(chat8KBody()); n < 8000 || n > 9000 {
		t.Errorf("chat8k body of %d bytes", n)
	}
	if n := len(ctx40KBody()); n < 38000 || n > 46000 {
		t.Errorf("ctx40k body of %d bytes", n)
	}
}
