package relay

import (
	"io"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

func decideChecker(mode vet.Mode) *vet.Checker {
	return vet.NewChecker(vet.Policy{Allowed: map[string]bool{"ok": true}, Mode: mode})
}

func TestResultVet(t *testing.T) {
	calls := func() []*vet.Call {
		return []*vet.Call{
			{ID: "a", Name: "ok", Args: []byte(`{}`)},
			{ID: "b", Name: "nope", Args: []byte(`{}`)},
			{ID: "c", Name: "ok", Args: []byte(`{}`)},
		}
	}
	for _, tc := range []struct {
		mode    vet.Mode
		blocked int
		errCall string
	}{
		{vet.ModeRefuse, 1, ""},
		{vet.ModeError, 1, "b"},
		{vet.ModeAudit, 0, ""},
	} {
		var res Result
		var seen []string
		ds := res.Vet(decideChecker(tc.mode), func(d vet.Decision) { seen = append(seen, d.CallID) }, calls())
		if len(ds) != 3 || strings.Join(seen, "") != "abc" || res.Blocked != tc.blocked {
			t.Fatalf("%s: %d decisions, recorded %q, blocked %d", tc.mode, len(ds), seen, res.Blocked)
		}
		got := ""
		if res.ErrorCall != nil {
			got = res.ErrorCall.CallID
		}
		if got != tc.errCall {
			t.Fatalf("%s: error call %q, want %q", tc.mode, got, tc.errCall)
		}
		// A nil recorder is allowed, and a set ErrorCall is kept.
		before := res.ErrorCall
		res.Vet(decideChecker(tc.mode), nil, calls())
		if res.ErrorCall != before || res.Blocked != 2*tc.blocked {
			t.Fatalf("%s: second batch: error call %v, blocked %d", tc.mode, res.ErrorCall, res.Blocked)
		}
	}
}

func TestRecordAndAfterRelease(t *testing.T) {
	for _, tc := range []struct {
		mode    vet.Mode
		verdict vet.Verdict
		blocked int
	}{
		{vet.ModeRefuse, vet.VerdictBlocked, 1},
		{vet.ModeError, vet.VerdictBlocked, 1},
		{vet.ModeAudit, vet.VerdictAudited, 0},
	} {
		var got []vet.Decision
		r := New(io.NopCloser(strings.NewReader("")), func(d vet.Decision) { got = append(got, d) }, Surface{})
		d := r.AfterRelease(decideChecker(tc.mode), &vet.Call{Choice: 2, ID: "call_1", Name: "ok"})
		want := vet.Decision{Kind: vet.KindToolCall, Choice: 2, CallID: "call_1", Tool: "ok", Verdict: tc.verdict, Reason: vet.ReasonAfterRelease}
		if len(got) != 1 || got[0].CallID != want.CallID || d.Kind != want.Kind || d.Verdict != want.Verdict || d.Reason != want.Reason ||
			d.Choice != want.Choice || d.CallID != want.CallID || d.Tool != want.Tool {
			t.Fatalf("%s: decision %+v, recorded %+v", tc.mode, d, got)
		}
		if r.Blocked() != tc.blocked {
			t.Fatalf("%s: blocked %d, want %d", tc.mode, r.Blocked(), tc.blocked)
		}
		r.Record(vet.Decision{Verdict: vet.VerdictAllowed})
		if r.Blocked() != tc.blocked || len(got) != 2 {
			t.Fatalf("%s: an allowed decision counted as blocked", tc.mode)
		}
	}
	// A nil recorder is allowed.
	r := New(io.NopCloser(strings.NewReader("")), nil, Surface{})
	r.Record(vet.Decision{Verdict: vet.VerdictBlocked})
	if r.Blocked() != 1 {
		t.Fatal("blocked decision not counted without a recorder")
	}
}

func TestSettle(t *testing.T) {
	mk := func() []*call {
		ps := []*call{
			{Pending[meta]{Call: &vet.Call{ID: "a", Name: "ok", Args: []byte(`{}`)}}},
			{Pending[meta]{Call: &vet.Call{ID: "b", Name: "nope", Args: []byte(`{}`)}}},
		}
		for i, p := range ps {
			p.Hold([]byte("ev"), meta{i})
		}
		return ps
	}
	for _, mode := range []vet.Mode{vet.ModeRefuse, vet.ModeError} {
		var recorded, settled []string
		ended := ""
		r := New(io.NopCloser(strings.NewReader("")), func(d vet.Decision) { recorded = append(recorded, d.CallID) }, Surface{})
		ps := mk()
		Settle[meta](&r, decideChecker(mode), ps, func(d vet.Decision) { ended = d.CallID }, func(p *call, d vet.Decision) {
			if len(p.Call.Held()) != 1 || p.Call.Args == nil {
				t.Errorf("%s: %s settled without its held event or arguments", mode, p.Call.ID)
			}
			settled = append(settled, p.Call.ID+":"+string(d.Verdict))
		})
		if strings.Join(recorded, "") != "ab" || r.Blocked() != 1 {
			t.Fatalf("%s: recorded %q, blocked %d", mode, recorded, r.Blocked())
		}
		if mode == vet.ModeError {
			if ended != "b" || settled != nil {
				t.Fatalf("error mode: ended by %q, settled %q", ended, settled)
			}
			continue
		}
		if ended != "" || strings.Join(settled, " ") != "a:allowed b:blocked" {
			t.Fatalf("refuse mode: ended by %q, settled %q", ended, settled)
		}
		for _, p := range ps {
			if p.Call.Held() != nil || p.Meta != nil || p.Call.Args != nil {
				t.Fatalf("refuse mode: %s kept its bytes", p.Call.ID)
			}
		}
	}
}

// TestCulprit: in error mode the stream ends for the first call blocked for itself — not for one
// blocked with its batch, nor for one held for confirmation, whose notice goes to the client in
// every mode.
func TestCulprit(t *testing.T) {
	t.Parallel()
	errMode := vet.NewChecker(vet.Policy{Mode: vet.ModeError})
	held := vet.Decision{Verdict: vet.VerdictHeld, Reason: "rule r: held"}
	batch := vet.Decision{Verdict: vet.VerdictBlocked, Reason: vet.ReasonBatch}
	bad := vet.Decision{Verdict: vet.VerdictBlocked, Reason: "tool not allowed"}
	ok := vet.Decision{Verdict: vet.VerdictAllowed}
	for _, c := range []struct {
		ds   []vet.Decision
		want int
	}{
		{[]vet.Decision{ok, held, batch}, -1},
		{[]vet.Decision{batch, held, bad}, 2},
		{[]vet.Decision{ok, bad, bad}, 1},
		{[]vet.Decision{ok}, -1},
	} {
		if got := Culprit(errMode, c.ds); got != c.want {
			t.Errorf("Culprit(%+v) = %d, want %d", c.ds, got, c.want)
		}
	}
	if got := Culprit(vet.NewChecker(vet.Policy{Mode: vet.ModeRefuse}), []vet.Decision{bad}); got != -1 {
		t.Errorf("refuse mode: %d", got)
	}
}
