// Package relaytest holds what the tests and benchmarks of the stream vetters (proxy/chatvet,
// proxy/respvet, proxy/anthvet) share: an upstream that splits a stream into random reads, a
// driver that pipes a stream through a vetter the way the proxy does, a reader of clean SSE
// output, the policy most tests vet against, and a benchmark of a relay beside a plain copy.
//
// It is imported by tests only. It knows nothing of any surface's wire format.
package relaytest

import (
	"bytes"
	"encoding/json"
	"io"
	"iter"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/sse"
)

// FuzzModes are the modes a fuzz input's mode byte picks from.
var FuzzModes = []vet.Mode{vet.ModeRefuse, vet.ModeError, vet.ModeAudit}

// ModeByte is the mode byte of a fuzz input that picks m from FuzzModes.
func ModeByte(m vet.Mode) byte {
	for i, fm := range FuzzModes {
		if fm == m {
			return byte(i)
		}
	}
	return 0
}

// Policy is the checker most tests use: get_weather, web_fetch and search are allowed, get_weather's
// arguments have a schema, and web_fetch may only fetch the docs site.
func Policy(mode vet.Mode, atomic bool) *vet.Checker {
	rules, err := vet.CompileRules([]vet.Rule{{ID: "docs", Tool: "web_fetch", Path: "url", Hosts: []string{"docs.example.com"}}})
	if err != nil {
		panic(err)
	}
	return vet.NewChecker(vet.Policy{
		Allowed: map[string]bool{"get_weather": true, "web_fetch": true, "search": true},
		Schemas: map[string][]byte{"get_weather": []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
		Rules:   rules,
		Mode:    mode,
		Atomic:  atomic,
	})
}

// ChunkReader returns 1..Max bytes per Read, at random.
type ChunkReader struct {
	Data []byte
	Rnd  *rand.Rand
	Max  int
}

func (r *ChunkReader) Read(p []byte) (int, error) {
	if len(r.Data) == 0 {
		return 0, io.EOF
	}
	n := min(1+r.Rnd.IntN(r.Max), len(p), len(r.Data))
	copy(p, r.Data[:n])
	r.Data = r.Data[n:]
	return n, nil
}

// Stream is what the surfaces' NewStream return.
type Stream interface {
	io.ReadCloser
	Blocked() int
}

// Open wraps an upstream in a surface's Stream that calls rec for every vetted call.
type Open func(up io.ReadCloser, rec func(vet.Decision)) Stream

// Run pipes input through the Stream that open returns, reading with a small buffer as a proxy
// might, and returns the output, the decisions and the count of blocked calls. With split > 0
// the upstream returns 1..split bytes per Read (seeded by seed).
func Run(t testing.TB, input string, split int, seed uint64, open Open) ([]byte, []vet.Decision, int) {
	t.Helper()
	var up io.Reader = strings.NewReader(input)
	if split > 0 {
		up = &ChunkReader{Data: []byte(input), Rnd: rand.New(rand.NewPCG(seed, 1)), Max: split}
	}
	var ds []vet.Decision
	s := open(io.NopCloser(up), func(d vet.Decision) { ds = append(ds, d) })
	var out []byte
	buf := make([]byte, 37)
	for {
		n, err := s.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return out, ds, s.Blocked()
}

// Events yields the events of an output stream that carry data, and fails the test if the output
// is not a clean SSE stream (an error, a last event not closed by a blank line, or an event that
// not every client would split into the same lines: see relay.Canonical).
func Events(t testing.TB, out []byte) iter.Seq[sse.Event] {
	return func(yield func(sse.Event) bool) {
		r := sse.NewReader(bytes.NewReader(out))
		for {
			ev, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil || ev.Truncated {
				t.Fatalf("output is not a clean SSE stream: %v %q", err, ev.Raw)
			}
			if !relay.Canonical(ev.Raw) {
				t.Fatalf("output event is not framed the same for every client: %q", ev.Raw)
			}
			if ev.HasData && !yield(ev) {
				return
			}
		}
	}
}

// EventReader returns one SSE event (up to a blank LF line) per Read, as an upstream connection
// tends to.
type EventReader struct{ Rest []byte }

func (r *EventReader) Read(p []byte) (int, error) {
	if len(r.Rest) == 0 {
		return 0, io.EOF
	}
	n := bytes.Index(r.Rest, []byte("\n\n")) + 2
	if n < 2 {
		n = len(r.Rest)
	}
	n = copy(p, r.Rest[:n])
	r.Rest = r.Rest[n:]
	return n, nil
}

// onlyReader hides WriterTo/ReaderFrom shortcuts, so the baseline copies through a buffer too.
type onlyReader struct{ io.Reader }

// Named is a stream for Bench.
type Named struct {
	Name string
	Data []byte
}

// Bench measures a surface's relay of each stream beside the baseline, a plain copy of the same
// bytes: sub-benchmarks name+"/copy" and name+"/relay". Both read the upstream one event per Read
// and copy through a 32 KiB buffer, as httputil.ReverseProxy does; name+"/relay-burst" reads the
// upstream in reads of up to 32 KiB instead. open builds the relay; its
// decisions are discarded.
func Bench(b *testing.B, open Open, streams ...Named) {
	run := func(b *testing.B, size int, mk func() io.Reader) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		buf := make([]byte, 32<<10)
		for b.Loop() {
			if _, err := io.CopyBuffer(io.Discard, mk(), buf); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, st := range streams {
		b.Run(st.Name+"/copy", func(b *testing.B) {
			run(b, len(st.Data), func() io.Reader { return onlyReader{&EventReader{st.Data}} })
		})
		b.Run(st.Name+"/relay", func(b *testing.B) {
			run(b, len(st.Data), func() io.Reader { return open(io.NopCloser(&EventReader{st.Data}), func(vet.Decision) {}) })
		})
		// The upstream ahead of the client: the whole stream comes in reads of up to 32 KiB (bytes.Reader
		// hidden behind onlyReader), so one Read of the relay handles many events.
		b.Run(st.Name+"/relay-burst", func(b *testing.B) {
			run(b, len(st.Data), func() io.Reader {
				return open(io.NopCloser(onlyReader{bytes.NewReader(st.Data)}), func(vet.Decision) {})
			})
		})
	}
}

// Opener is the Open of a surface's NewStream with checker c.
func Opener[R ~func(vet.Decision), S Stream](newStream func(io.ReadCloser, *vet.Checker, R) S, c *vet.Checker) Open {
	return func(up io.ReadCloser, rec func(vet.Decision)) Stream { return newStream(up, c, rec) }
}

// JSONString is s as a JSON string.
func JSONString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// SplitRunes cuts s into pieces of n runes (the last may be shorter).
func SplitRunes(s string, n int) []string {
	var out []string
	r := []rune(s)
	for len(r) > 0 {
		k := min(n, len(r))
		out = append(out, string(r[:k]))
		r = r[k:]
	}
	return out
}

// CheckTextAllocs fails the test when the relay that open builds allocates per event: the
// difference between relaying text(400) and text(200), streams that differ in the count of text
// events, must stay under one allocation per fifty events. The upstream returns one event per Read.
func CheckTextAllocs(t testing.TB, open Open, text func(n int) []byte) {
	t.Helper()
	run := func(data []byte) float64 {
		buf := make([]byte, 32<<10)
		return testing.AllocsPerRun(20, func() {
			_, _ = io.CopyBuffer(io.Discard, open(io.NopCloser(&EventReader{data}), func(vet.Decision) {}), buf)
		})
	}
	const n = 200
	if per := (run(text(2*n)) - run(text(n))) / n; per > 0.02 {
		t.Fatalf("%.3f allocations per text event", per)
	}
}
