package admin

import (
	"fmt"
	"strings"
)

// diffContext is the number of unchanged lines shown around each change.
const diffContext = 3

// maxDiffCells bounds the LCS table (lines of a × lines of b, after the common head and tail are
// taken off). Beyond it the changed middle is shown as removed, then added: still a correct diff,
// only longer.
const maxDiffCells = 1 << 22

// diffOp is one line of an edit script: ' ' kept, '-' removed from a, '+' added from b.
type diffOp struct {
	kind byte
	line string // with its "\n", except for a last line without one
}

// unifiedDiff returns the unified diff (as `diff -u`) that turns a into b, "" when they are equal.
func unifiedDiff(aName, bName, a, b string) string {
	if a == b {
		return ""
	}
	ops := diffLines(splitLines(a), splitLines(b))
	// aAt[i] and bAt[i] count the lines of a and b before ops[i].
	aAt, bAt := make([]int, len(ops)+1), make([]int, len(ops)+1)
	for i, op := range ops {
		aAt[i+1], bAt[i+1] = aAt[i], bAt[i]
		if op.kind != '+' {
			aAt[i+1]++
		}
		if op.kind != '-' {
			bAt[i+1]++
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", aName, bName)
	for i := 0; i < len(ops); {
		for i < len(ops) && ops[i].kind == ' ' {
			i++
		}
		if i == len(ops) {
			break
		}
		start, end := max(0, i-diffContext), i+1
		// Extend the hunk over further changes separated by at most 2×context unchanged lines.
		for j := i + 1; j < len(ops); {
			if ops[j].kind != ' ' {
				j++
				end = j
				continue
			}
			k := j
			for k < len(ops) && ops[k].kind == ' ' {
				k++
			}
			if k == len(ops) || k-j > 2*diffContext {
				break
			}
			j = k
		}
		stop := min(len(ops), end+diffContext)
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aAt[start], aAt[stop]-aAt[start]), hunkRange(bAt[start], bAt[stop]-bAt[start]))
		for _, op := range ops[start:stop] {
			out.WriteByte(op.kind)
			out.WriteString(op.line)
			if !strings.HasSuffix(op.line, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		i = stop
	}
	return out.String()
}

// hunkRange is "L,N" of a hunk header: the first line (1-based) and the count; an empty range names
// the line before it.
func hunkRange(before, count int) string {
	switch count {
	case 0:
		return fmt.Sprintf("%d,0", before)
	case 1:
		return fmt.Sprintf("%d", before+1)
	}
	return fmt.Sprintf("%d,%d", before+1, count)
}

// splitLines splits s after each "\n"; a last line without one is kept as it is.
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// diffLines is a shortest edit script from a to b: the common head and tail are kept, the middle is
// aligned on a longest common subsequence of lines.
func diffLines(a, b []string) []diffOp {
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	ops := make([]diffOp, 0, len(a)+len(b)-head-tail)
	for _, l := range a[:head] {
		ops = append(ops, diffOp{' ', l})
	}
	ops = append(ops, lcsOps(a[head:len(a)-tail], b[head:len(b)-tail])...)
	for _, l := range a[len(a)-tail:] {
		ops = append(ops, diffOp{' ', l})
	}
	return ops
}

// lcsOps aligns a and b on a longest common subsequence (dynamic programming over line ids).
func lcsOps(a, b []string) []diffOp {
	n, m := len(a), len(b)
	ops := make([]diffOp, 0, n+m)
	if n == 0 || m == 0 || n*m > maxDiffCells {
		for _, l := range a {
			ops = append(ops, diffOp{'-', l})
		}
		for _, l := range b {
			ops = append(ops, diffOp{'+', l})
		}
		return ops
	}
	ids := map[string]int32{}
	intern := func(lines []string) []int32 {
		out := make([]int32, len(lines))
		for i, l := range lines {
			id, ok := ids[l]
			if !ok {
				id = int32(len(ids))
				ids[l] = id
			}
			out[i] = id
		}
		return out
	}
	ai, bi := intern(a), intern(b)
	// lcs[i*w+j] is the length of an LCS of a[i:] and b[j:].
	w := m + 1
	lcs := make([]int32, (n+1)*w)
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if ai[i] == bi[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case ai[i] == bi[j]:
			ops = append(ops, diffOp{' ', a[i]})
			i, j = i+1, j+1
		case lcs[(i+1)*w+j] >= lcs[i*w+j+1]:
			ops = append(ops, diffOp{'-', a[i]})
			i++
		default:
			ops = append(ops, diffOp{'+', b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, diffOp{'-', a[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, diffOp{'+', b[j]})
	}
	return ops
}
