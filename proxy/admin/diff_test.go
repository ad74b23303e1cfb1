package admin

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestUnifiedDiffGolden(t *testing.T) {
	a := "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm\n"
	b := "a\nB\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm\nn"
	want := `--- x@1
+++ x@2
@@ -1,5 +1,5 @@
 a
-b
+B
 c
 d
 e
@@ -11,3 +11,4 @@
 k
 l
 m
+n
\ No newline at end of file
`
	if got := unifiedDiff("x@1", "x@2", a, b); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := unifiedDiff("x", "y", "same\n", "same\n"); got != "" {
		t.Fatalf("equal texts: %q", got)
	}
	if got, want := unifiedDiff("x", "y", "", "one\n"), "--- x\n+++ y\n@@ -0,0 +1 @@\n+one\n"; got != want {
		t.Fatalf("from empty: %q, want %q", got, want)
	}
	if got, want := unifiedDiff("x", "y", "one\ntwo\n", "one\n"), "--- x\n+++ y\n@@ -1,2 +1 @@\n one\n-two\n"; got != want {
		t.Fatalf("removal: %q, want %q", got, want)
	}
}

var hunkHeader = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@$`)

// applyDiff applies a unified diff to a, checking every context and removed line and every header
// count.
func applyDiff(t *testing.T, a, diff string) string {
	t.Helper()
	src := splitLines(a)
	lines := strings.SplitAfter(diff, "\n")
	var out []string
	pos := 0 // lines of src consumed
	i := 2   // skip --- and +++
	atoi := func(s string, def int) int {
		if s == "" {
			return def
		}
		n, _ := strconv.Atoi(s)
		return n
	}
	for i < len(lines) && lines[i] != "" {
		m := hunkHeader.FindStringSubmatch(strings.TrimSuffix(lines[i], "\n"))
		if m == nil {
			t.Fatalf("bad hunk header %q in\n%s", lines[i], diff)
		}
		aStart, aCount, bCount := atoi(m[1], 0), atoi(m[2], 1), atoi(m[4], 1)
		from := aStart - 1
		if aCount == 0 {
			from = aStart
		}
		if from < pos {
			t.Fatalf("hunks overlap or go backwards at %q", lines[i])
		}
		out = append(out, src[pos:from]...)
		pos = from
		i++
		gotA, gotB := 0, 0
		for i < len(lines) && lines[i] != "" && !strings.HasPrefix(lines[i], "@@") {
			l := lines[i]
			i++
			text := l[1:]
			if i < len(lines) && strings.HasPrefix(lines[i], `\ No newline`) {
				text = strings.TrimSuffix(text, "\n")
				i++
			}
			switch l[0] {
			case ' ', '-':
				if pos >= len(src) || src[pos] != text {
					t.Fatalf("line %d of a: want %q, diff says %q\n%s", pos+1, at(src, pos), text, diff)
				}
				pos++
				gotA++
				if l[0] == ' ' {
					out = append(out, text)
					gotB++
				}
			case '+':
				out = append(out, text)
				gotB++
			default:
				t.Fatalf("bad line %q", l)
			}
		}
		if gotA != aCount || gotB != bCount {
			t.Fatalf("hunk %s counts %d,%d; lines %d,%d\n%s", m[0], aCount, bCount, gotA, gotB, diff)
		}
	}
	out = append(out, src[pos:]...)
	return strings.Join(out, "")
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "<end>"
}

func TestUnifiedDiffApplies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gen := func(n int) string {
		var b strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "l%d\n", r.IntN(6))
		}
		s := b.String()
		if r.IntN(4) == 0 {
			s = strings.TrimSuffix(s, "\n")
		}
		return s
	}
	for i := 0; i < 3000; i++ {
		a, b := gen(r.IntN(30)), gen(r.IntN(30))
		if r.IntN(2) == 0 && len(a) > 4 { // mostly similar texts, like two versions
			b = a[:len(a)/2] + gen(r.IntN(3)) + a[len(a)/2:]
		}
		d := unifiedDiff("a", "b", a, b)
		if a == b {
			if d != "" {
				t.Fatalf("equal: %q", d)
			}
			continue
		}
		if got := applyDiff(t, a, d); got != b {
			t.Fatalf("patch of\n%q\nwith\n%s\ngives\n%q\nwant\n%q", a, d, got, b)
		}
	}
}

func TestUnifiedDiffLargeFallsBack(t *testing.T) {
	var a, b strings.Builder
	for i := 0; i < 3000; i++ {
		fmt.Fprintf(&a, "a%d\n", i)
		fmt.Fprintf(&b, "b%d\n", i)
	}
	d := unifiedDiff("a", "b", a.String(), b.String())
	if got := applyDiff(t, a.String(), d); got != b.String() {
		t.Fatal("large diff does not apply")
	}
}
