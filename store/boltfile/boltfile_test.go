package boltfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	db, err := Open(good, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("b"))
		if err != nil {
			return err
		}
		for i := range 2000 {
			if err := b.Put([]byte{byte(i >> 8), byte(i)}, make([]byte, 100)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if db, err := Open(good, nil); err != nil {
		t.Fatalf("a good file: %v", err)
	} else {
		_ = db.Close()
	}

	for name, b := range map[string][]byte{
		"truncated":    data[:len(data)/2],
		"not bolt":     []byte("this is not a bbolt file, but long enough to be read as one....................................."),
		"zeroed metas": append(make([]byte, 2*os.Getpagesize()), data[2*os.Getpagesize():]...),
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name+".db")
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			db, err := Open(p, nil)
			if err == nil {
				_ = db.Close()
				t.Fatal("a damaged file was opened")
			}
			var ce *CorruptError
			if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Detail == "" {
				t.Fatalf("error %v (%T), want a CorruptError with a detail", err, err)
			}
		})
	}
}
