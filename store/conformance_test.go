package store_test

import (
	"path/filepath"
	"testing"

	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/storetest"
)

func TestBoltConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, h storetest.Hooks) store.Store {
		s, err := store.Open(filepath.Join(t.TempDir(), "s.db"), store.Options{Validate: h.Validate, Links: h.Links})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
