package etcdstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/promptgate/promptgate/store"
)

// snapshotFormat names the snapshot file format; a file without it is refused.
const snapshotFormat = "promptgate-etcd-snapshot/1"

// snapshotFile is the JSON of Options.SnapshotFile.
type snapshotFile struct {
	Format    string       `json:"format"`
	Prefix    string       `json:"prefix"`
	Revision  int64        `json:"revision"`
	Templates []fileRecord `json:"templates"`
	Protocols []fileRecord `json:"protocols"`
	MCPPins   []fileRecord `json:"mcppins,omitempty"`
	// Shadows are the protocol versions in shadow.
	Shadows []fileRecord                  `json:"shadows,omitempty"`
	Tools   map[string]store.ToolOverride `json:"tools"`
}

type fileRecord struct {
	Name      string          `json:"name"`
	Version   int             `json:"version"`
	CreatedAt time.Time       `json:"createdAt"`
	Author    string          `json:"author,omitempty"`
	Note      string          `json:"note"`
	Body      json.RawMessage `json:"body"`
}

func toFile(m map[string]store.Record) []fileRecord {
	out := make([]fileRecord, 0, len(m))
	for _, r := range m {
		out = append(out, fileRecord{Name: r.Name, Version: r.Version, CreatedAt: r.CreatedAt, Author: r.Author, Note: r.Note, Body: r.Body})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// writeSnapshotFile writes snap atomically (temporary file, then rename) when it differs from the
// last one written.
func (s *Etcd) writeSnapshotFile(snap store.Snapshot, rev int64) error {
	data, err := json.MarshalIndent(snapshotFile{Format: snapshotFormat, Prefix: s.p, Revision: rev,
		Templates: toFile(snap.Templates), Protocols: toFile(snap.Protocols), MCPPins: toFile(snap.MCPPins), Shadows: toFile(snap.Shadows), Tools: snap.Tools}, "", " ")
	if err != nil {
		return err
	}
	s.fileMu.Lock()
	defer s.fileMu.Unlock()
	if bytes.Equal(data, s.fileLast) {
		return nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(s.snapFile), filepath.Base(s.snapFile)+".tmp*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(data)
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), s.snapFile)
	}
	if werr != nil {
		_ = os.Remove(tmp.Name())
		return werr
	}
	s.fileLast = data
	return nil
}

// ReadSnapshotFile reads a snapshot file written for prefix and checks every body with check
// (structure and the Validate hook). Errors name the file and what is wrong.
func ReadSnapshotFile(path, prefix string, check func(store.Kind, []byte) (string, error)) (store.Snapshot, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot file %s: %w", path, err)
	}
	var f snapshotFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot file %s: not a promptgate snapshot (%v); delete it, or start etcd", path, err)
	}
	if f.Format != snapshotFormat {
		return store.Snapshot{}, fmt.Errorf("snapshot file %s: format %q, want %q", path, f.Format, snapshotFormat)
	}
	if f.Prefix != prefix {
		return store.Snapshot{}, fmt.Errorf("snapshot file %s: written for prefix %q, not %q", path, f.Prefix, prefix)
	}
	snap := store.NewSnapshot()
	for kind, recs := range map[store.Kind][]fileRecord{store.KindTemplate: f.Templates, store.KindProtocol: f.Protocols, store.KindMCPPins: f.MCPPins} {
		for i, r := range recs {
			name, err := check(kind, r.Body)
			if err != nil {
				return store.Snapshot{}, fmt.Errorf("snapshot file %s: %s[%d]: %w", path, kind, i, err)
			}
			if name != r.Name || r.Version < 1 {
				return store.Snapshot{}, fmt.Errorf("snapshot file %s: %s[%d]: name %q version %d does not match its body (%q)", path, kind, i, r.Name, r.Version, name)
			}
			if _, dup := snap.Of(kind)[name]; dup {
				return store.Snapshot{}, fmt.Errorf("snapshot file %s: %s %q appears twice", path, kind, name)
			}
			snap.Of(kind)[name] = store.Record{Kind: kind, Name: name, Version: r.Version, CreatedAt: r.CreatedAt, Author: r.Author, Note: r.Note, Body: []byte(r.Body)}
		}
	}
	for i, r := range f.Shadows {
		name, err := check(store.KindProtocol, r.Body)
		if err != nil || name != r.Name || r.Version < 1 {
			return store.Snapshot{}, fmt.Errorf("snapshot file %s: shadows[%d]: not a protocol version of its name (%v)", path, i, err)
		}
		snap.Shadows[name] = store.Record{Kind: store.KindProtocol, Name: name, Version: r.Version, CreatedAt: r.CreatedAt, Author: r.Author, Note: r.Note, Body: []byte(r.Body)}
	}
	for name, o := range f.Tools {
		snap.Tools[name] = o
	}
	if len(snap.Templates)+len(snap.Protocols) == 0 {
		return store.Snapshot{}, errors.New("snapshot file " + path + ": holds no definitions")
	}
	return snap, nil
}
