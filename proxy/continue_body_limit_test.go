package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/flow/flowtest"
)

// A round of continue mode resends every turn before it: the model's refused call, arguments and
// all, and promptgate's refusal. A model that makes a large refused call again and again grows each
// next request by that much; the rounds end where the next request would pass limits.maxBodyBytes.

// limitServer is promptgate in front of up, serving protocol with limits.maxBodyBytes = maxBody and
// its log written to logs (when not nil).
func limitServer(t testing.TB, up string, protocol json.RawMessage, maxBody int, logs io.Writer) (*httptest.Server, *memAudit) {
	t.Helper()
	id := gjson.GetBytes(protocol, "id").String()
	e := testEngine(t, fmt.Sprintf("defaultProtocol: %s\nlimits: {maxBodyBytes: %d}\n", id, maxBody), nil, nil, []json.RawMessage{protocol})
	u, err := url.Parse(up + "/v1")
	if err != nil {
		t.Fatal(err)
	}
	gu, err := url.Parse(up)
	if err != nil {
		t.Fatal(err)
	}
	rec := &memAudit{}
	o := Options{Engine: e, Upstreams: map[string]Upstream{"openai": {URL: u}, "anthropic": {URL: u}, "gemini": {URL: gu}}, Audit: rec}
	if logs != nil {
		o.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, rec
}

// largeRefusedCall is the banking case's attacker payment with a memo of n bytes: refused on every
// round.
func largeRefusedCall(t testing.TB, cc continueCase, n int) flowtest.Call {
	t.Helper()
	args, err := sjson.SetBytes(cc.evil.Args, "memo", strings.Repeat("m", n))
	if err != nil {
		t.Fatal(err)
	}
	return flowtest.Call{ID: cc.evil.ID, Tool: cc.evil.Tool, Args: args}
}

// limitRequest is the client's request of the banking case; a Responses request is not stored
// upstream, so that each round resends the conversation (a stored one sends only the refusals).
func limitRequest(t testing.TB, cc continueCase, sf flowtest.Surface, stream bool) []byte {
	t.Helper()
	var extra map[string]any
	if sf == flowtest.Responses {
		extra = map[string]any{"store": false}
	}
	return flowRequest(t, sf, cc.turns, cc.tools, stream, extra)
}

// TestContinueRoundsEndAtBodyLimit: on every surface, stream and non-stream, a model that makes a
// 40 KiB refused call on every round is asked again only while the next request fits
// limits.maxBodyBytes (256 KiB): no request larger than the limit goes upstream, the rounds end
// before continueRounds (8) runs out, the client gets the last round's refusal as refuse writes it
// (one notice, nothing of the call), every round's refusal is in the decision log, and the log says
// why the rounds ended.
func TestContinueRoundsEndAtBodyLimit(t *testing.T) {
	t.Parallel()
	const limit, memo, rounds = 256 << 10, 40 << 10, 8
	cc := newContinueCase(t)
	protocol, _ := sjson.SetBytes(cc.protocol, "toolCalls.continueRounds", rounds)
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", sf, stream), func(t *testing.T) {
				t.Parallel()
				evil := largeRefusedCall(t, cc, memo)
				up := newFlowUpstream(t, scriptedTurn{text: "Paying. ", calls: []flowtest.Call{evil}, in: 1, out: 1})
				logs := &syncBuffer{}
				ts, rec := limitServer(t, up.URL, protocol, limit, logs)
				status, h, b := post(t, ts, sf, limitRequest(t, cc, sf, stream), nil)
				if status != http.StatusOK {
					t.Fatalf("status %d: %s", status, b)
				}
				reqs := up.requests()
				for i, r := range reqs {
					if len(r) > limit {
						t.Errorf("upstream request %d has %d bytes, past the limit %d", i, len(r), limit)
					}
				}
				n := len(reqs) - 1 // rounds continued
				if n < 2 || n >= rounds {
					t.Fatalf("%d rounds continued, want more than one and fewer than %d (request sizes %v)", n, rounds, sizes(reqs))
				}
				if grow := len(reqs[n]) - len(reqs[n-1]); len(reqs[n])+grow <= limit {
					t.Errorf("the rounds ended although the next request (about %d bytes) fit the limit %d", len(reqs[n])+grow, limit)
				}
				got := read(t, sf, stream, b)
				if len(got.calls) != 0 || bytes.Contains(b, []byte(cc.evil.ID)) || bytes.Contains(b, []byte("mmmm")) {
					t.Errorf("the refused call reached the client: %.300s", b)
				}
				if strings.Count(got.text, "[promptgate] blocked tool call "+cc.evil.Tool+": ") != 1 {
					t.Errorf("want the last round's notice alone, got %q", got.text)
				}
				evs := rec.eventsOfRequest(h.Get(HeaderRequestID))
				for r := 0; r <= n; r++ {
					if !hasEvent(evs, cc.evil.Tool, audit.KindProvenance, audit.VerdictBlocked, r) {
						t.Errorf("no refusal recorded in round %d", r)
					}
				}
				if l := logs.String(); !strings.Contains(l, "larger than limits.maxBodyBytes") || !strings.Contains(l, fmt.Sprintf("round=%d", n+1)) {
					t.Errorf("the log does not say why the rounds ended:\n%s", l)
				}
			})
		}
	}
}

func sizes(bodies [][]byte) []int {
	out := make([]int, len(bodies))
	for i, b := range bodies {
		out[i] = len(b)
	}
	return out
}

// sizeUpstream answers every request with the same scripted turn, in the shape and mode asked, and
// keeps only the size of what it received: a measure of the proxy's allocations is not swollen by
// the upstream's record.
type sizeUpstream struct {
	*httptest.Server
	turn     scriptedTurn
	mu       sync.Mutex
	received int64
	requests int
}

func newSizeUpstream(t testing.TB, turn scriptedTurn) *sizeUpstream {
	t.Helper()
	u := &sizeUpstream{turn: turn}
	u.Server = httptest.NewServer(http.HandlerFunc(u.serve))
	t.Cleanup(u.Close)
	return u
}

func (u *sizeUpstream) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.received += int64(len(b))
	u.requests++
	u.mu.Unlock()
	sf, _ := upstreamSurface(r.URL.Path)
	if !streamAsked(r.URL.Path, b) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, u.turn.body(sf, 1))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range u.turn.events(sf, 1) {
		writeSplit(w, ev, len(ev)/2+1)
	}
}

// take returns what was received since the last take: bytes and requests.
func (u *sizeUpstream) take() (int64, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	b, n := u.received, u.requests
	u.received, u.requests = 0, 0
	return b, n
}

// continueAlloc is what one continued request through the proxy costs: the bytes allocated in the
// process (the proxy, and the test's client and upstream) and the bytes sent upstream. The least of
// runs is taken.
func continueAlloc(t testing.TB, ts *httptest.Server, up *sizeUpstream, sf flowtest.Surface, body []byte, runs int) (alloc uint64, sent int64, requests int) {
	t.Helper()
	alloc = ^uint64(0)
	for range runs {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		status, _, b := post(t, ts, sf, body, nil)
		runtime.ReadMemStats(&after)
		if status != http.StatusOK {
			t.Fatalf("status %d: %.300s", status, b)
		}
		alloc = min(alloc, after.TotalAlloc-before.TotalAlloc)
		sent, requests = up.take()
	}
	return alloc, sent, requests
}

// TestContinueMemoryBoundedByBodyLimit: what a continued request allocates is bounded by
// limits.maxBodyBytes, not by continueRounds: with a 150 KiB refused call on every round and a 512
// KiB limit, allowing 8 rounds costs about what allowing 3 does (the limit ends both after 3),
// where 8 rounds of resent turns would cost several times more. Measured as bytes allocated
// (runtime.MemStats), not time; not parallel, so that no other test allocates meanwhile.
func TestContinueMemoryBoundedByBodyLimit(t *testing.T) {
	const limit, memo = 512 << 10, 150 << 10
	cc := newContinueCase(t)
	for _, sf := range flowtest.Surfaces {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", sf, stream), func(t *testing.T) {
				up := newSizeUpstream(t, scriptedTurn{text: "Paying. ", calls: []flowtest.Call{largeRefusedCall(t, cc, memo)}, in: 1, out: 1})
				body := limitRequest(t, cc, sf, stream)
				var alloc [2]uint64
				for i, rounds := range []int{3, 8} {
					protocol, _ := sjson.SetBytes(cc.protocol, "toolCalls.continueRounds", rounds)
					ts, _ := limitServer(t, up.URL, protocol, limit, nil)
					a, sent, requests := continueAlloc(t, ts, up, sf, body, 3)
					alloc[i] = a
					t.Logf("continueRounds %d: %d upstream requests, %d bytes sent, %d bytes allocated", rounds, requests, sent, a)
					if requests != 4 || sent > 4*limit {
						t.Errorf("continueRounds %d: %d requests, %d bytes sent upstream; want 4 requests within the limit", rounds, requests, sent)
					}
				}
				if alloc[1] > 2*alloc[0] {
					t.Errorf("allowing 8 rounds allocates %d bytes, allowing 3 %d: the cost grows with the rounds, not the limit", alloc[1], alloc[0])
				}
			})
		}
	}
}

// BenchmarkContinueRoundsAtBodyLimit: one continued request whose model makes a 150 KiB refused
// call on every round, under a 512 KiB limit, with 3 and 8 rounds allowed side by side: B/op and
// the bytes sent upstream per request stay the same, since the limit ends the rounds.
func BenchmarkContinueRoundsAtBodyLimit(b *testing.B) {
	const limit, memo = 512 << 10, 150 << 10
	cc := newContinueCase(b)
	for _, rounds := range []int{3, 8} {
		b.Run(fmt.Sprintf("rounds=%d", rounds), func(b *testing.B) {
			up := newSizeUpstream(b, scriptedTurn{text: "Paying. ", calls: []flowtest.Call{largeRefusedCall(b, cc, memo)}, in: 1, out: 1})
			protocol, _ := sjson.SetBytes(cc.protocol, "toolCalls.continueRounds", rounds)
			ts, _ := limitServer(b, up.URL, protocol, limit, nil)
			body := limitRequest(b, cc, flowtest.Chat, false)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if status, _, out := post(b, ts, flowtest.Chat, body, nil); status != http.StatusOK {
					b.Fatalf("status %d: %.300s", status, out)
				}
			}
			sent, _ := up.take()
			b.ReportMetric(float64(sent)/float64(b.N), "upstream-B/op")
		})
	}
}
