package metrics

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/audit"
)

// TestDecisionLabelsBounded: whatever detail a decision's reason carries (an offset, a schema
// location, a rule's path), the reason label keeps the stable head only, so the series stay as few
// as the checks.
func TestDecisionLabelsBounded(t *testing.T) {
	t.Parallel()
	m := New(nil)
	for i := range 1000 {
		n := strconv.Itoa(i)
		for _, r := range []string{
			"arguments are not valid json: duplicate key at offset " + n,
			"arguments do not match schema: at #/properties/p" + n + ": maxLength",
			"rule docs: url" + n + " does not match the pattern",
		} {
			m.Record(context.Background(), audit.Event{Kind: audit.KindToolCall, Verdict: audit.VerdictBlocked, Reason: r})
		}
	}
	var series []string
	for line := range strings.Lines(scrape(t, m)) {
		if strings.HasPrefix(line, "promptgate_tool_calls_blocked_total{") {
			series = append(series, strings.TrimSpace(line))
		}
	}
	want := []string{
		`promptgate_tool_calls_blocked_total{reason="arguments are not valid json",verdict="blocked"} 1000`,
		`promptgate_tool_calls_blocked_total{reason="arguments do not match schema",verdict="blocked"} 1000`,
		`promptgate_tool_calls_blocked_total{reason="rule docs",verdict="blocked"} 1000`,
	}
	if strings.Join(series, "\n") != strings.Join(want, "\n") {
		t.Errorf("series:\n%s\nwant\n%s", strings.Join(series[:min(len(series), 5)], "\n"), strings.Join(want, "\n"))
	}
}

// TestDecisionLabelsHoldNoClientText: a tool removed under one of its aliases is recorded with the
// alias in parentheses after the reason ("denied by the protocol (as web_search_20990101)"), and an
// Anthropic tool's dated type, one of its aliases, is the client's to choose; the label keeps the
// head only, so many distinct types still make one series.
func TestDecisionLabelsHoldNoClientText(t *testing.T) {
	t.Parallel()
	m := New(nil)
	for i := range 500 {
		alias := "web_search_" + strconv.Itoa(20990000+i)
		m.Record(context.Background(), audit.Event{Kind: audit.KindToolRemoved, Verdict: audit.VerdictRemoved, Reason: "denied by the protocol (as " + alias + ")"})
	}
	var series []string
	for line := range strings.Lines(scrape(t, m)) {
		if strings.HasPrefix(line, "promptgate_tools_removed_total{") {
			series = append(series, strings.TrimSpace(line))
		}
	}
	if want := `promptgate_tools_removed_total{reason="denied by the protocol"} 500`; len(series) != 1 || series[0] != want {
		t.Errorf("%d series, first: %q; want %s", len(series), series[:min(len(series), 3)], want)
	}
}

// TestFlowDecisionLabels: information-flow decisions are counted by kind and verdict, both from
// fixed sets (an unknown verdict is "other"), never by their reasons, which name the operator's
// rules and paths.
func TestFlowDecisionLabels(t *testing.T) {
	t.Parallel()
	m := New(nil)
	for i := range 100 {
		r := "rule payee: recipient (value " + strconv.Itoa(i) + ") does not occur in user"
		m.Record(context.Background(), audit.Event{Kind: audit.KindProvenance, Verdict: audit.VerdictBlocked, Reason: r})
		m.Record(context.Background(), audit.Event{Kind: audit.KindConfirm, Verdict: audit.VerdictHeld, Reason: r})
		m.Record(context.Background(), audit.Event{Kind: audit.KindBudget, Verdict: "verdict-" + strconv.Itoa(i)})
	}
	m.Record(context.Background(), audit.Event{Kind: audit.KindFlow, Verdict: audit.VerdictConfirmed})
	var series []string
	for line := range strings.Lines(scrape(t, m)) {
		if strings.HasPrefix(line, "promptgate_flow_decisions_total{") {
			series = append(series, strings.TrimSpace(line))
		}
	}
	want := []string{
		`promptgate_flow_decisions_total{kind="budget",verdict="other"} 100`,
		`promptgate_flow_decisions_total{kind="confirm",verdict="held"} 100`,
		`promptgate_flow_decisions_total{kind="flow",verdict="confirmed"} 1`,
		`promptgate_flow_decisions_total{kind="provenance",verdict="blocked"} 100`,
	}
	if strings.Join(series, "\n") != strings.Join(want, "\n") {
		t.Errorf("series:\n%s\nwant\n%s", strings.Join(series, "\n"), strings.Join(want, "\n"))
	}
}

// TestShadowMetrics: a shadow event counts by the two verdicts, each from a fixed set ("other" for
// any other); the judged requests and calls and the prompts' characters add up.
func TestShadowMetrics(t *testing.T) {
	t.Parallel()
	m := New(nil)
	for _, v := range []string{audit.VerdictBlocked, audit.VerdictBlocked, audit.VerdictHeld, "made-up"} {
		m.Record(context.Background(), audit.Event{Kind: audit.KindShadow, ActiveVerdict: audit.VerdictAllowed, Verdict: v, Tool: "t"})
	}
	m.ShadowRequest(100, 130)
	m.ShadowRequest(50, 40)
	m.ShadowCall()
	var series []string
	for line := range strings.Lines(scrape(t, m)) {
		if strings.HasPrefix(line, "promptgate_shadow_") {
			series = append(series, strings.TrimSpace(line))
		}
	}
	want := []string{
		`promptgate_shadow_differences_total{active_verdict="allowed",shadow_verdict="blocked"} 2`,
		`promptgate_shadow_differences_total{active_verdict="allowed",shadow_verdict="held"} 1`,
		`promptgate_shadow_differences_total{active_verdict="allowed",shadow_verdict="other"} 1`,
		`promptgate_shadow_judged_total{kind="call"} 1`,
		`promptgate_shadow_judged_total{kind="request"} 2`,
		`promptgate_shadow_prompt_chars_total{version="active"} 150`,
		`promptgate_shadow_prompt_chars_total{version="shadow"} 170`,
	}
	if strings.Join(series, "\n") != strings.Join(want, "\n") {
		t.Errorf("series:\n%s\nwant\n%s", strings.Join(series, "\n"), strings.Join(want, "\n"))
	}
}

// TestStatusLabelIsItoa: the status label is the status in decimal, for every status an answer
// can have and for a few it cannot.
func TestStatusLabelIsItoa(t *testing.T) {
	for _, status := range []int{-1, 0, 1, 99, 999, 1000} {
		if got := statusLabel(status); got != strconv.Itoa(status) {
			t.Errorf("statusLabel(%d) = %q", status, got)
		}
	}
	for status := 100; status < 600; status++ {
		if got := statusLabel(status); got != strconv.Itoa(status) {
			t.Errorf("statusLabel(%d) = %q", status, got)
		}
	}
}
