// Package boltfile opens bbolt files so that a damaged one is refused with an error instead of
// crashing the process: bbolt panics on a damaged page (in Open itself for a damaged freelist, or
// on the first read that meets it) and faults with SIGBUS, which nothing recovers, when it maps a
// truncated file.
//
// It owns only the opening: the definitions store (package store) and the audit ring (policy/audit)
// keep their own buckets and their own error messages.
package boltfile

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrCorrupt: the file is damaged — truncated, with pages that fail bbolt's consistency check, or
// not a bbolt file at all. Open returns it as a *CorruptError.
var ErrCorrupt = errors.New("file is corrupt")

// CorruptError is a damaged file, with what was found wrong.
type CorruptError struct{ Detail string }

func (e *CorruptError) Error() string        { return ErrCorrupt.Error() + " (" + e.Detail + ")" }
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func corrupt(detail any) error { return &CorruptError{Detail: fmt.Sprint(detail)} }

// Open opens (or creates) the bbolt file at path with o and checks every page of it before anything
// reads it. A damaged file gives a *CorruptError (errors.Is ErrCorrupt). Other errors
// (bolterrors.ErrTimeout for a file locked by another process, permission errors) are returned as
// bbolt gives them. Limit: after a panic inside bolt.Open the file stays mapped, and so locked,
// until the process exits. The check walks each page once, so it suits the small files promptgate
// keeps.
func Open(path string, o *bolt.Options) (db *bolt.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, corrupt(r)
		}
	}()
	if err := shortFile(path); err != nil {
		return nil, corrupt(err)
	}
	db, err = bolt.Open(path, 0o600, o)
	if errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrChecksum) || errors.Is(err, bolterrors.ErrVersionMismatch) {
		return nil, corrupt(err)
	}
	if err != nil {
		return nil, err
	}
	if err := db.View(func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		return first
	}); err != nil {
		_ = db.Close()
		return nil, corrupt(err)
	}
	return db, nil
}

// shortFile reports a bbolt file that is shorter than a valid meta page of it says (a truncated
// copy): bbolt maps the file and would fault reading past its end. The meta page is the 16-byte
// page header, then magic, version and page size (uint32 each), flags (uint32), the root bucket (16
// bytes), the freelist page id and the high-water page id (uint64 each), little-endian.
func shortFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // bolt.Open reports it
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || info.Size() == 0 {
		return nil
	}
	const magic = 0xED0CDAED
	var off int64
	for range 2 {
		var m [64]byte
		if _, err := f.ReadAt(m[:], off); err != nil {
			return nil
		}
		if binary.LittleEndian.Uint32(m[16:]) != magic {
			return nil // not a meta page: bolt.Open and the check judge the file
		}
		pageSize := int64(binary.LittleEndian.Uint32(m[24:]))
		hwm := int64(binary.LittleEndian.Uint64(m[56:]))
		if pageSize <= 0 || hwm < 0 || hwm > info.Size()/pageSize {
			return fmt.Errorf("the file has %d bytes but its meta page says %d pages of %d bytes: it was truncated", info.Size(), hwm, pageSize)
		}
		off = pageSize
	}
	return nil
}
