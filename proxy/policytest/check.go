package policytest

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
)

// Result is the verdict on one case.
type Result struct {
	Case *Case
	Took time.Duration
	// Failures are the expectations the proxy did not meet; Problems are mistakes of the case
	// itself found only by running it (an answer the surface cannot read, a call the answer does
	// not hold).
	Failures, Problems []Problem
	// Details say what was decided, a line each: the request's status, the protocol, the tools kept
	// and removed, the layered prompt's size and every call's decision.
	Details []string
}

// Passed reports whether the case passed: no failure, no problem.
func (r *Result) Passed() bool { return len(r.Failures)+len(r.Problems) == 0 }

func (r *Result) fail(line int, field, format string, args ...any) {
	r.Failures = append(r.Failures, Problem{File: r.Case.File, Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

func (r *Result) problem(line int, field, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{File: r.Case.File, Line: line, Field: field, Message: fmt.Sprintf(format, args...)})
}

// checkStep compares what came of step s of the case with what it expects, adding to r; work is
// what the run's patterns may still cost (see MaxPatternWork).
func checkStep(r *Result, s *step, out *outcome, work *atomic.Int64) {
	c := r.Case
	r.Details = append(r.Details, describe(c, out)...)
	if out.panicked != nil {
		r.fail(s.line, s.field, "the proxy aborted the answer: %v", out.panicked)
	}
	if !checkAnswers(r, s, out) {
		return
	}
	e := s.expect
	want, field, line := e.status, e.field+".status", e.line
	if want == 0 && e.errorCode == "" {
		want, field = http.StatusOK, e.field+" (status 200 unless expect.status or expect.error says otherwise)"
	}
	if want != 0 && out.status != want {
		r.fail(line, field, "got status %d%s, want %d", out.status, errorSuffix(out.client), want)
	}
	if e.errorCode != "" {
		if got := errorCode(out.client); got != e.errorCode {
			r.fail(line, e.field+".error", "got error code %q, want %q (status %d)", got, e.errorCode, out.status)
		}
	}
	checkTools(r, out, e.toolsKept, "kept")
	checkTools(r, out, e.toolsRemoved, "removed")
	if !e.prompt.empty() {
		if out.prepared == nil {
			r.fail(line, e.field+".prompt", "the request was refused (status %d%s): no prompt was built", out.status, errorSuffix(out.client))
		} else {
			checkText(r, e.prompt, out.prepared.prompt, "the layered prompt", work)
		}
	}
	checkText(r, e.client, string(out.client), "the client's answer", work)
	if e.calls != nil {
		checkCalls(r, s, out, *e.calls)
	}
}

// errorSuffix is " (CODE: MESSAGE)" of an error body, "" for another body.
func errorSuffix(body []byte) string {
	if code := errorCode(body); code != "" {
		return fmt.Sprintf(" (%s: %s)", code, errorMessage(body))
	}
	return ""
}

// checkAnswers finds the mistakes of the case's answers that only running it shows: no answer where
// the proxy asked for one, an answer the surface cannot read, a stream for a request that asked for
// none (or the other way round). It reports false when the run says nothing more about the case.
func checkAnswers(r *Result, s *step, out *outcome) bool {
	c := r.Case
	if out.asked > 0 && out.prepared == nil {
		r.problem(c.Line, c.Field+".path", "%s is not a route the proxy rewrites: it passed the request through unchanged, and nothing was decided", c.Path)
		return false
	}
	switch {
	case out.asked > 0 && len(s.answers) == 0:
		r.problem(s.line, s.field+".answer", "missing: the proxy sent the request upstream; give the upstream's answer")
		return false
	case out.asked > len(s.answers):
		r.fail(s.line, s.field+".answers", "the proxy asked the upstream %d times (onViolation continue asks again after a blocked call); the case gives %d answers", out.asked, len(s.answers))
	case out.asked > 0 && out.asked < len(s.answers):
		a := s.answers[out.asked]
		r.fail(a.line, a.field, "never asked for: the proxy asked the upstream %d times", out.asked)
	}
	if out.asked == 0 || out.asked > len(s.answers) {
		return true
	}
	last := s.answers[out.asked-1]
	first := s.answers[0]
	if p := out.prepared; p != nil && first.status < 400 && p.stream != first.stream {
		if p.stream {
			r.problem(first.line, first.field, "the request asks for a stream, and the answer is a JSON body: give events or sse")
		} else {
			r.problem(first.line, first.field, "the request asks for no stream, and the answer is an event stream: give body, or ask for a stream in the request")
		}
		return false
	}
	if out.status == http.StatusBadGateway && errorCode(out.client) == "upstream_error" {
		r.problem(last.line, last.field, "the proxy cannot read it as an answer of %s: %s", c.Path, errorMessage(out.client))
		return false
	}
	for _, d := range out.decisions {
		if d.Reason == vet.ReasonMalformedStream {
			r.problem(last.line, last.field, "an event of the stream is not valid JSON (the proxy blocked the call it was part of)")
			return false
		}
	}
	if errorCode(out.client) == relay.CodeTruncated {
		r.problem(last.line, last.field, "the stream ends before the last event of a %s stream (the proxy ended it as truncated): %s", c.Path, errorMessage(out.client))
		return false
	}
	return true
}

// errorMessage is the message of an error body or of a stream's error event.
func errorMessage(body []byte) string {
	for _, part := range append([][]byte{body}, bytes.Split(body, []byte("\n"))...) {
		part = bytes.TrimPrefix(bytes.TrimSpace(part), []byte("data:"))
		if m := gjson.GetBytes(part, "error.message").String(); m != "" {
			return m
		}
	}
	return ""
}

// checkTools compares the tools kept or removed with the list the case expects (as sets).
func checkTools(r *Result, out *outcome, want *fieldList, which string) {
	if want == nil {
		return
	}
	if out.prepared == nil {
		r.fail(want.line, want.field, "the request was refused (status %d%s): no tools were %s", out.status, errorSuffix(out.client), which)
		return
	}
	got := out.prepared.kept
	if which == "removed" {
		got = nil
		for _, rm := range out.prepared.removed {
			got = append(got, rm.Name)
		}
	}
	missing, extra := setDiff(want.names, got), setDiff(got, want.names)
	if len(missing)+len(extra) == 0 {
		return
	}
	var parts []string
	if len(missing) > 0 {
		parts = append(parts, "not "+which+": "+strings.Join(missing, ", "))
	}
	if len(extra) > 0 {
		parts = append(parts, "also "+which+": "+strings.Join(extra, ", "))
	}
	r.fail(want.line, want.field, "%s (%s: %s)", strings.Join(parts, "; "), which, listOrNone(got))
}

// setDiff is what a holds that b does not, sorted.
func setDiff(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// checkText runs text checks on text (named what in messages). A pattern whose matching would take
// the run past what its patterns may cost is not run: its check fails, saying so.
func checkText(r *Result, t textChecks, text, what string, work *atomic.Int64) {
	for _, c := range t.contains {
		if !strings.Contains(text, c.text) {
			r.fail(c.line, c.field, "%s does not contain %q", what, c.text)
		}
	}
	for _, c := range t.notContains {
		if i := strings.Index(text, c.text); i >= 0 {
			r.fail(c.line, c.field, "%s contains %q (at byte %d)", what, c.text, i)
		}
	}
	for _, c := range t.matches {
		if !affordable(r, c, len(text), what, work) {
			continue
		}
		if !c.re.MatchString(text) {
			r.fail(c.line, c.field, "%s does not match %s", what, c.re)
		}
	}
	for _, c := range t.notMatches {
		if !affordable(r, c, len(text), what, work) {
			continue
		}
		if loc := c.re.FindStringIndex(text); loc != nil {
			r.fail(c.line, c.field, "%s matches %s (at byte %d)", what, c.re, loc[0])
		}
	}
}

// affordable takes what matching c over n bytes may cost (its program's size for every byte) from
// the run's work; where too little is left, the check fails and the pattern is not run.
func affordable(r *Result, c fieldPattern, n int, what string, work *atomic.Int64) bool {
	cost := int64(max(c.insts, 1)) * int64(n+1)
	if work.Add(-cost) >= 0 {
		return true
	}
	work.Add(cost)
	r.fail(c.line, c.field, "not checked: matching %s against %s (%d bytes) would take the run's patterns past %d instruction-bytes; shorten the pattern or the text, or split the file",
		c.re, what, n, MaxPatternWork)
	return false
}

// outcomeOf is the outcome a case names for a decision's verdict.
func outcomeOf(v vet.Verdict) string {
	switch v {
	case vet.VerdictAllowed:
		return outcomeReleased
	case vet.VerdictAudited:
		return outcomeAudited
	case vet.VerdictHeld:
		return outcomeHeld
	case vet.VerdictConfirmed:
		return outcomeConfirmed
	}
	return outcomeBlocked
}

// checkCalls matches the expected calls to the decisions — by id, or by tool in the order decided —
// and checks each; a call the case does not name fails it.
func checkCalls(r *Result, s *step, out *outcome, want []callExpect) {
	taken := make([]bool, len(out.decisions))
	var answers [][]byte
	for _, a := range s.answers {
		answers = append(answers, a.bytes())
	}
	inAnswers := func(s string) bool { return bytes.Contains(bytes.Join(answers, nil), []byte(s)) }
	for _, e := range want {
		i := -1
		for j, d := range out.decisions {
			if !taken[j] && (e.id != "" && d.CallID == e.id || e.id == "" && d.Tool == e.tool) {
				i = j
				break
			}
		}
		what, name := "id", e.id
		if e.id == "" {
			what, name = "tool", e.tool
		}
		if i < 0 {
			if !inAnswers(name) {
				r.problem(e.line, e.field+"."+what, "the answer holds no call with %s %q (the calls decided: %s)", what, name, callList(out.decisions))
			} else {
				r.fail(e.line, e.field, "the answer holds %q, but the proxy decided no further call with that %s (the calls decided: %s)", name, what, callList(out.decisions))
			}
			continue
		}
		taken[i] = true
		checkCall(r, e, out.decisions[i])
	}
	for j, d := range out.decisions {
		if !taken[j] {
			r.fail(s.expect.line, s.expect.field+".calls", "call %d (%s) was %s: the case names no expectation for it (expect.calls names every call)", j+1, callName(d), decisionText(d))
		}
	}
}

// checkCall compares one decision with what the case expects of it.
func checkCall(r *Result, e callExpect, d vet.Decision) {
	if e.id != "" && e.tool != "" && d.Tool != e.tool {
		r.fail(e.line, e.field+".tool", "call %q is a call of %s, not of %s", e.id, d.Tool, e.tool)
	}
	got := outcomeOf(d.Verdict)
	bad := got != e.outcome
	if e.rule != nil && d.Rule != *e.rule {
		bad = true
	}
	if e.kind != "" && kindOf(d) != e.kind {
		bad = true
	}
	if e.reason != "" && !strings.Contains(d.Reason, e.reason) {
		bad = true
	}
	if bad {
		r.fail(e.line, e.field, "call %s: got %s, want %s", callName(d), decisionText(d), expectText(e))
	}
	if e.argsSHA256 != "" {
		if got := audit.ArgsDigest(d.Args); got != e.argsSHA256 {
			r.fail(e.line, e.field+".argumentsSha256", "call %s: its arguments have SHA-256 %s: they are not the recorded ones", callName(d), got)
		}
	}
}

func kindOf(d vet.Decision) string {
	if d.Kind == "" {
		return vet.KindToolCall
	}
	return d.Kind
}

// callName names a call in messages: its tool and id.
func callName(d vet.Decision) string {
	if d.CallID == "" {
		return d.Tool
	}
	return fmt.Sprintf("%s id %s", d.Tool, d.CallID)
}

// decisionText says what was decided: the outcome, the kind and rule that decided it, and why.
func decisionText(d vet.Decision) string {
	s := outcomeOf(d.Verdict)
	if d.Reason == "" {
		return s
	}
	by := kindOf(d)
	if d.Rule != "" {
		by += " rule " + d.Rule
	}
	return fmt.Sprintf("%s by %s: %s", s, by, d.Reason)
}

// expectText says what a case expects of a call, in decisionText's words.
func expectText(e callExpect) string {
	s := e.outcome
	var by []string
	if e.kind != "" {
		by = append(by, e.kind)
	}
	if e.rule != nil {
		if *e.rule == "" {
			by = append(by, "no rule")
		} else {
			by = append(by, "rule "+*e.rule)
		}
	}
	if len(by) > 0 {
		s += " by " + strings.Join(by, " ")
	}
	if e.reason != "" {
		s += fmt.Sprintf(" (reason containing %q)", e.reason)
	}
	return s
}

// callList lists the calls decided, for messages.
func callList(ds []vet.Decision) string {
	if len(ds) == 0 {
		return "none"
	}
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = callName(d)
	}
	return strings.Join(names, "; ")
}

// describe is what -v prints of a run.
func describe(c *Case, out *outcome) []string {
	lines := []string{fmt.Sprintf("POST %s under protocol %s: status %d%s, upstream asked %d time(s)", c.Path, c.Protocol, out.status, errorSuffix(out.client), out.asked)}
	if p := out.prepared; p != nil {
		var removed []string
		for _, rm := range p.removed {
			removed = append(removed, rm.Name+" ("+rm.Reason+")")
		}
		lines = append(lines, fmt.Sprintf("protocol %s version %d; tools kept: %s; removed: %s", p.protocol, p.version, listOrNone(p.kept), listOrNone(removed)),
			fmt.Sprintf("layered prompt: %d bytes", len(p.prompt)))
	}
	for i, d := range out.decisions {
		lines = append(lines, fmt.Sprintf("call %d: %s: %s", i+1, callName(d), decisionText(d)))
		for _, m := range d.More {
			lines = append(lines, fmt.Sprintf("        and %s", decisionText(m)))
		}
	}
	return lines
}
