package store_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/store"
)

// A damaged file is refused by Open with ErrCorrupt naming the file — never a panic, in Open or
// later.
func TestOpenCorruptFile(t *testing.T) {
	s, path := open(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{0xA5, 0x5A, 0x00, 0xFF}, len(good))
	cases := map[string][]byte{
		"garbage":                junk,
		"truncated":              good[:len(good)/3],
		"data pages overwritten": append(bytes.Clone(good[:8192]), junk[:len(good)-8192]...),
		"meta pages overwritten": append(bytes.Clone(junk[:8192]), good[8192:]...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "promptgate.db")
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			st, err := store.Open(p, store.Options{})
			if err == nil {
				st.Close()
				t.Fatal("a damaged file was opened")
			}
			if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), p) || !strings.HasPrefix(err.Error(), "store: ") {
				t.Errorf("%v; want ErrCorrupt naming the file", err)
			}
		})
	}
}
