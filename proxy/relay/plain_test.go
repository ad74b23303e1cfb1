package relay

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"
	"unicode"

	"github.com/promptgate/promptgate/proxy/sse"
)

// FuzzPlainIsCanonical: an event the Reader calls Plain is one Canonical accepts, so the relay
// may forward it as it came without asking Canonical; and on a stream without CR, where the
// Reader answers for every event, it calls Plain every whole event that Canonical accepts.
func FuzzPlainIsCanonical(f *testing.F) {
	for _, s := range []string{
		"event: a\nid: 1\nretry: 5\ndata: {\"x\":1}\n: c\n\n",
		"data\n\nevent\ndata: x\n\nfoo: bar\n\n data: x\n\n",
		"data: x\n\ndata: y\r\n\r\ndata: z\n\n",
		"data: x\rdata: y\n\n\ufeffdata: z\n\ndata: w",
	} {
		f.Add([]byte(s), uint64(1))
	}
	f.Fuzz(func(t *testing.T, in []byte, seed uint64) {
		rnd := rand.New(rand.NewPCG(seed, 3))
		r := sse.NewReader(&pieces{data: in, rnd: rnd})
		noCR := bytes.IndexByte(in, '\r') < 0
		for {
			ev, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			canonical := !ev.Truncated && Canonical(ev.Raw)
			if ev.Plain && !canonical || noCR && ev.Plain != canonical {
				t.Fatalf("%q: Plain %v, Canonical %v", ev.Raw, ev.Plain, canonical)
			}
		}
	})
}

// pieces returns 1..16 bytes per Read.
type pieces struct {
	data []byte
	rnd  *rand.Rand
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+p.rnd.IntN(16), len(b), len(p.data))
	copy(b, p.data[:n])
	p.data = p.data[n:]
	return n, nil
}

// looksJSONLines is LooksJSON as its doc says it, line by line.
func looksJSONLines(data []byte) bool {
	for _, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimLeftFunc(line, func(r rune) bool { return unicode.IsSpace(r) || r == '\ufeff' })
		if len(line) > 0 && (line[0] == '{' || line[0] == '[' && string(bytes.TrimRightFunc(line, unicode.IsSpace)) != "[DONE]") {
			return true
		}
	}
	return false
}

// FuzzLooksJSON: LooksJSON answers as its definition, line by line.
func FuzzLooksJSON(f *testing.F) {
	for _, s := range []string{"", "{", " {", "x\n{", "\ufeff{", "\u00a0\n \t{", "[1]", "x\n\ny", "{\n", "\v{", " [", "x\n\t[", "[DONE]", " [DONE] ", "[DONE]x"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := LooksJSON(data), looksJSONLines(data); got != want {
			t.Fatalf("LooksJSON(%q) = %v, want %v", data, got, want)
		}
	})
}
