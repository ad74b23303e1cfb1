// Package relaytest holds what the tests and benchmarks of the stream vetters (proxy/surface/chat,
// proxy/surface/responses, proxy/surface/messages) share: an upstream that splits a stream into
// random reads, a driver that pipes a stream through a vetter the way the proxy does, a reader of
// clean SSE output, the policy most tests vet against, the checks and fuzz seeds every surface's
// stream tests make, and a benchmark of a relay beside a plain copy.
//
// It is imported by tests only. It knows nothing of any surface's wire format.
package relaytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"iter"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

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

// FuzzMode is the mode a fuzz input's mode byte picks from FuzzModes.
func FuzzMode(b byte) vet.Mode { return FuzzModes[int(b)%len(FuzzModes)] }

// AddSeeds adds the seeds of one stream case to a fuzz target that takes (input []byte, mode byte,
// atomic bool, split uint8, seed uint64): the case as it is, read whole, and in the next mode with
// the other atomicity, read 1..5 bytes at a time.
func AddSeeds(f *testing.F, input string, m vet.Mode, atomic bool) {
	mode := ModeByte(m)
	f.Add([]byte(input), mode, atomic, uint8(0), uint64(1))
	f.Add([]byte(input), (mode+1)%byte(len(FuzzModes)), !atomic, uint8(5), uint64(2))
}

// Policy is the checker most tests use: get_weather, web_fetch and search are allowed,
// get_weather's arguments have a schema, and web_fetch may only fetch the docs site.
func Policy(mode vet.Mode, atomic bool) *vet.Checker {
	rules, err := vet.CompileRules([]vet.Rule{{ID: "docs", Tool: "web_fetch", Path: "url", Check: vet.Check{Hosts: []string{"docs.example.com"}}}})
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
		// The upstream ahead of the client: the whole stream comes in reads of up to 32 KiB
		// (bytes.Reader hidden behind onlyReader), so one Read of the relay handles many events.
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

// CheckShortcutsChangeNothing runs input with the JSON of every data line spaced out (Spaced)
// through open, as Run does with the same split and seed, and fails the test unless it gives out,
// ds and blocked again, the outputs compared with each data line's JSON compacted (and norm, when
// not nil, applied to both: random ids). No two spaced events share their bytes, so a shortcut that
// a stream learns from one event (a template) never answers another: this is the stream without its
// shortcuts, which must change nothing, and a check that no reader of the stream tells "{ " from
// "{".
func CheckShortcutsChangeNothing(t testing.TB, input string, split int, seed uint64, open Open, out []byte, ds []vet.Decision, blocked int, norm func([]byte) []byte) {
	t.Helper()
	out2, ds2, blocked2 := Run(t, Spaced(input), split, seed, open)
	out, out2 = compactData(out), compactData(out2)
	if norm != nil {
		out, out2 = norm(out), norm(out2)
	}
	if !bytes.Equal(out, out2) || !reflect.DeepEqual(ds, ds2) || blocked != blocked2 {
		i := 0
		for i < min(len(out), len(out2)) && out[i] == out2[i] {
			i++
		}
		t.Fatalf("the shortcuts change the stream from byte %d:\nwith    %q %+v\nwithout %q %+v", i, out[i:], ds, out2[i:], ds2)
	}
}

// Spaced is an SSE stream with n spaces written after the first '{' of the n-th data line that has
// one: JSON that every reader reads as before, in bytes that no two events share.
func Spaced(input string) string {
	var b strings.Builder
	n := 0
	for _, line := range strings.SplitAfter(input, "\n") {
		if rest, ok := strings.CutPrefix(line, "data:"); ok {
			if i := strings.IndexByte(rest, '{'); i >= 0 && strings.TrimSpace(rest[:i]) == "" {
				n++
				b.WriteString("data:" + rest[:i+1] + strings.Repeat(" ", n) + rest[i+1:])
				continue
			}
		}
		b.WriteString(line)
	}
	return b.String()
}

// compactData is an SSE stream with the JSON of each data line compacted.
func compactData(out []byte) []byte {
	var b bytes.Buffer
	for _, line := range bytes.SplitAfter(out, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			body := bytes.TrimRight(rest, "\r\n")
			var c bytes.Buffer
			if json.Compact(&c, body) == nil {
				b.WriteString("data: ")
				b.Write(c.Bytes())
				b.Write(rest[len(body):])
				continue
			}
		}
		b.Write(unspaced(line))
	}
	return b.Bytes()
}

// unspaced is a data line that is not one JSON value (part of one spread over several lines, or no
// JSON at all) without the spaces after its first '{', as Spaced may have added them.
func unspaced(line []byte) []byte {
	rest, ok := bytes.CutPrefix(line, []byte("data:"))
	i := bytes.IndexByte(rest, '{')
	if !ok || i < 0 || len(bytes.TrimSpace(rest[:i])) > 0 {
		return line
	}
	j := i + 1
	for j < len(rest) && rest[j] == ' ' {
		j++
	}
	return append(append([]byte("data:"), rest[:i+1]...), rest[j:]...)
}

// CheckBlocked fails the test unless blocked, a stream's count of blocked calls, is the number of
// blocked decisions it recorded.
func CheckBlocked(t testing.TB, ds []vet.Decision, blocked int) {
	t.Helper()
	n := 0
	for _, d := range ds {
		if d.Blocked() {
			n++
		}
	}
	if n != blocked {
		t.Fatalf("Blocked() = %d, %d blocked decisions: %+v", blocked, n, ds)
	}
}

// CheckNoLeak fails the test when out holds one of leaks (an id or argument bytes of a blocked
// call).
func CheckNoLeak(t testing.TB, out []byte, leaks []string) {
	t.Helper()
	for _, leak := range leaks {
		if bytes.Contains(out, []byte(leak)) {
			t.Errorf("output holds %q of a blocked call:\n%s", leak, out)
		}
	}
}

// CheckSplits runs a stream case whole (run(0, 0)) and then split into reads of 1 byte and of 1..7
// bytes, three seeds each: check sees every output, and every split output must be the whole one
// (after norm, when not nil, has made both comparable).
func CheckSplits(t testing.TB, run func(split int, seed uint64) ([]byte, []vet.Decision, int), norm func([]byte) []byte,
	check func(out []byte, ds []vet.Decision, blocked int)) {
	t.Helper()
	if norm == nil {
		norm = func(b []byte) []byte { return b }
	}
	whole, ds, blocked := run(0, 0)
	check(whole, ds, blocked)
	for _, split := range []int{1, 7} {
		for seed := range uint64(3) {
			out, ds, blocked := run(split, seed)
			check(out, ds, blocked)
			if !bytes.Equal(norm(out), norm(whole)) {
				t.Fatalf("split %d seed %d: output differs:\n%s\n---\n%s", split, seed, out, whole)
			}
		}
	}
}

// TextFirst checks that a stream hands out what it has before the upstream sends more: it writes
// head to the stream that open returns (no recorder) and reads until a line holds until, which must
// come, with want in what was read, before the upstream sends anything else. It then writes tail,
// ends the upstream and returns the rest of the output.
func TextFirst(t testing.TB, open Open, head, until, want, tail string) []byte {
	t.Helper()
	pr, pw := io.Pipe()
	r := bufio.NewReader(open(pr, nil))
	got := make(chan string, 1)
	go func() {
		var b strings.Builder
		for !strings.Contains(b.String(), until) {
			line, err := r.ReadString('\n')
			b.WriteString(line)
			if err != nil {
				break
			}
		}
		got <- b.String()
	}()
	go func() { _, _ = io.WriteString(pw, head) }()
	select {
	case out := <-got:
		if !strings.Contains(out, want) {
			t.Fatalf("text not forwarded: %s", out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("text was held back while the upstream had not sent the call yet")
	}
	go func() {
		_, _ = io.WriteString(pw, tail)
		_ = pw.Close()
	}()
	rest, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return rest
}
