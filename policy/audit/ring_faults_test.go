package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A damaged ring file is refused at open with a message naming it — never a panic on a later read.
func TestRingCorruptFile(t *testing.T) {
	r := openTestRing(t, 10)
	for i := range 5 {
		r.Record(t.Context(), ev(i))
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(r.Path())
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte("ring!"), len(good))
	for name, b := range map[string][]byte{
		"garbage":                junk,
		"truncated":              good[:len(good)/3],
		"data pages overwritten": append(bytes.Clone(good[:8192]), junk[:len(good)-8192]...),
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "audit.db")
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			ring, err := OpenRing(p, 10, nil)
			if err == nil {
				ring.Close()
				t.Fatal("a damaged ring was opened")
			}
			if !strings.Contains(err.Error(), p) || !strings.HasPrefix(err.Error(), "audit: open ring ") {
				t.Errorf("%v; want a message naming the file", err)
			}
		})
	}
}
