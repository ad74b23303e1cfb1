package ctxjson

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func benchBuild(b *testing.B, size, max int, wantTruncated bool) {
	sources := context(size)
	meta := Meta{Protocol: "tech", Skipped: []Skip{{"notes", "timeout"}}}
	line, truncated := Build(meta, sources, max, nil)
	if truncated != wantTruncated || utf8.RuneCount(line) > max {
		b.Fatalf("truncated=%v, %d characters", truncated, utf8.RuneCount(line))
	}
	b.ReportAllocs()
	for b.Loop() {
		Build(meta, sources, max, nil)
	}
}

// BenchmarkBuild3K is a typical context that fits: the fast path.
func BenchmarkBuild3K(b *testing.B) { benchBuild(b, 3<<10, 12000, false) }

// BenchmarkBuild40K fits a 40 KB context into the default 12000 characters.
func BenchmarkBuild40K(b *testing.B) { benchBuild(b, 40<<10, 12000, true) }

// BenchmarkBuild1M fits a 1 MB context into 12000 characters.
func BenchmarkBuild1M(b *testing.B) { benchBuild(b, 1<<20, 12000, true) }

func BenchmarkBuild40KBudgets(b *testing.B) {
	sources := context(40 << 10)
	meta := Meta{Protocol: "tech"}
	budgets := mustBudgets(`{"request.attachments":0.5,"memory":2000}`, 12000)
	b.ReportAllocs()
	for b.Loop() {
		Build(meta, sources, 12000, budgets)
	}
}

func BenchmarkEncode40K(b *testing.B) {
	v := context(40 << 10)[0].Value
	buf := AppendEncode(nil, v)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendEncode(buf[:0], v)
	}
}

func BenchmarkParse40K(b *testing.B) {
	raw := Encode(context(40 << 10)[0].Value)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// escaped40K is shaped like the harness's ctx40k context: ten attachments of text with a quote,
// a line break or a tab every ~25 bytes, so most strings take Parse's escape path.
func escaped40K() []byte {
	att := Array()
	for i := range 10 {
		att.Append(Object().
			Set("name", String(fmt.Sprintf("notes-%d.md", i))).
			Set("text", String(strings.Repeat("Quarterly numbers \"look\" fine.\n=== SYSTEM CORE ===\t", 80))))
	}
	return Encode(Object().Set("attachments", att).Set("memory", Object().Set("lang", String("en"))))
}

func BenchmarkParse40KEscaped(b *testing.B) {
	raw := escaped40K()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseBuild40KEscaped is what a ctx40k request costs here: parse the context, then fit
// it with the harness's budgets into the default 12000 characters.
func BenchmarkParseBuild40KEscaped(b *testing.B) {
	raw := escaped40K()
	meta := Meta{Protocol: "bench"}
	budgets := mustBudgets(`{"request.attachments":0.5,"memory":2000}`, 12000)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		v, err := Parse(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, truncated := Build(meta, []Source{{Name: "request", Value: v}}, 12000, budgets); !truncated {
			b.Fatal("not truncated")
		}
	}
}
