package ctxjson

import (
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
