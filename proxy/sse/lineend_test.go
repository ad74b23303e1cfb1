package sse

import (
	"bytes"
	"testing"
)

// FuzzLineEnd: lineEnd finds what bytes.IndexAny(b, "\r\n") finds.
func FuzzLineEnd(f *testing.F) {
	for _, s := range []string{"", "a", "\n", "\r", "\r\n", "ab\ncd\re", "ab\rcd\n", "data: x\n\n", "xx\r"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := lineEnd(b), bytes.IndexAny(b, "\r\n"); got != want {
			t.Fatalf("lineEnd(%q) = %d, want %d", b, got, want)
		}
	})
}
