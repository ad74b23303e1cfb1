package chatvet

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/policy/vet"
)

// textStream is a recorded-style 200-chunk text stream.
func textStream() []byte {
	in := []string{role()}
	for i := range 198 {
		in = append(in, text(fmt.Sprintf(" word%d", i)))
	}
	in = append(in, finish(0, "stop"), done)
	return []byte(frame(in))
}

// toolStream has some text and three parallel calls, one of them blocked.
func toolStream() []byte {
	in := concat([]string{role(), text("Let me check."), toolEv(0, tc(0, "call_a", "get_weather", ""))},
		callEvents(0, 0, "call_a", "get_weather", `{"city":"Zürich","unit":"celsius","days":3}`, 3)[1:],
		callEvents(0, 1, "call_b", "web_fetch", fetchGood, 3),
		callEvents(0, 2, "call_c", "web_fetch", fetchBad, 3),
		[]string{finish(0, "tool_calls"), done})
	return []byte(frame(in))
}

// benchRead copies src through r the way httputil.ReverseProxy does (32 KiB buffer).
func benchRead(b *testing.B, mk func() io.Reader, size int) {
	b.SetBytes(int64(size))
	b.ReportAllocs()
	buf := make([]byte, 32<<10)
	for b.Loop() {
		if _, err := io.CopyBuffer(io.Discard, mk(), buf); err != nil {
			b.Fatal(err)
		}
	}
}

// eventReader returns one SSE event per Read, as an upstream connection tends to.
type eventReader struct{ rest []byte }

func (r *eventReader) Read(p []byte) (int, error) {
	if len(r.rest) == 0 {
		return 0, io.EOF
	}
	n := bytes.Index(r.rest, []byte("\n\n")) + 2
	if n < 2 {
		n = len(r.rest)
	}
	n = copy(p, r.rest[:n])
	r.rest = r.rest[n:]
	return n, nil
}

// onlyReader hides WriterTo/ReaderFrom shortcuts, so the baseline copies through a buffer too.
type onlyReader struct{ io.Reader }

func BenchmarkStream(b *testing.B) {
	for _, s := range []struct {
		name string
		data []byte
	}{{"text200", textStream()}, {"tools3", toolStream()}} {
		b.Run(s.name+"/copy", func(b *testing.B) {
			benchRead(b, func() io.Reader { return onlyReader{&eventReader{s.data}} }, len(s.data))
		})
		b.Run(s.name+"/stream", func(b *testing.B) {
			benchRead(b, func() io.Reader {
				return NewStream(io.NopCloser(&eventReader{s.data}), policy(vet.ModeRefuse, false), nil)
			}, len(s.data))
		})
	}
}

func TestBenchStreams(t *testing.T) {
	// The benchmark inputs do what they say.
	out, _, blocked := runStream(t, string(textStream()), policy(vet.ModeRefuse, false), 0, 0)
	if !bytes.Equal(out, textStream()) || blocked != 0 || strings.Count(string(out), "data: ") != 201 {
		t.Fatalf("text stream changed or has the wrong size")
	}
	out, _, blocked = runStream(t, string(toolStream()), policy(vet.ModeRefuse, false), 0, 0)
	got := assemble(t, out)
	if blocked != 1 || len(got.Calls) != 2 || got.Content[0] == "" {
		t.Fatalf("tool stream: blocked %d, %+v", blocked, got)
	}
}
