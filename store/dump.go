package store

import (
	"bytes"
	"context"
	"encoding/binary"

	"fmt"
	"sort"
	"strconv"

	bolt "go.etcd.io/bbolt"
)

// Dump is everything a store holds, byte for byte, in a backend-neutral form: what `promptgate
// store copy` moves between bbolt and etcd. Every slice is sorted (definitions by kind order then
// name, versions and rollouts by number, tools by name), so two dumps of the same content are
// equal.
type Dump struct {
	// CreatedAt is the time the store was initialised, as stored (RFC 3339).
	CreatedAt string
	Defs      []DumpDef
	// RolloutSeq is the last rollout sequence number handed out.
	RolloutSeq uint64
	Rollouts   []DumpRollout
	Tools      []DumpTool
}

// DumpDef is one name with all its versions.
type DumpDef struct {
	Kind Kind
	Name string
	// Seq is the last version number handed out.
	Seq     uint64
	Active  int
	History []int
	// Shadow is the version in shadow (protocols; 0 = none).
	Shadow int
	// Versions, oldest first.
	Versions []DumpVersion
}

// DumpVersion is one version: its info JSON and its body, as stored.
type DumpVersion struct {
	Version    int
	Info, Body []byte
}

// DumpRollout is one applied rollout: its sequence number, id and AppliedRollout JSON as stored.
type DumpRollout struct {
	Seq uint64
	ID  string
	Raw []byte
}

// DumpTool is one tool override: the ToolOverride JSON as stored.
type DumpTool struct {
	Name string
	Raw  []byte
}

// Sort puts every slice of d in its canonical order.
func (d *Dump) Sort() {
	order := map[Kind]int{}
	for i, k := range Kinds() {
		order[k] = i
	}
	sort.Slice(d.Defs, func(i, j int) bool {
		a, b := d.Defs[i], d.Defs[j]
		if a.Kind != b.Kind {
			return order[a.Kind] < order[b.Kind]
		}
		return a.Name < b.Name
	})
	for i := range d.Defs {
		def := &d.Defs[i]
		if len(def.History) == 0 {
			def.History = nil // absent and empty are the same
		}
		sort.Slice(def.Versions, func(i, j int) bool { return def.Versions[i].Version < def.Versions[j].Version })
	}
	sort.Slice(d.Rollouts, func(i, j int) bool { return d.Rollouts[i].Seq < d.Rollouts[j].Seq })
	sort.Slice(d.Tools, func(i, j int) bool { return d.Tools[i].Name < d.Tools[j].Name })
}

// Check verifies what a reader of the dump relies on: valid kinds and names, versions from 1 to at
// most Seq, an active version that exists, rollout ids unique.
func (d *Dump) Check() error {
	seen := map[string]bool{}
	for _, def := range d.Defs {
		if !def.Kind.Valid() || !ValidName(def.Name) {
			return fmt.Errorf("dump: bad definition %s/%q", def.Kind, def.Name)
		}
		key := Key(def.Kind, def.Name)
		if seen[key] {
			return fmt.Errorf("dump: %s appears twice", key)
		}
		seen[key] = true
		have := map[int]bool{}
		for _, v := range def.Versions {
			if v.Version < 1 || uint64(v.Version) > def.Seq || have[v.Version] {
				return fmt.Errorf("dump: %s: version %d out of range (last %d) or repeated", key, v.Version, def.Seq)
			}
			have[v.Version] = true
		}
		if def.Active != 0 && !have[def.Active] {
			return fmt.Errorf("dump: %s: active version %d does not exist", key, def.Active)
		}
		if def.Shadow != 0 && (!have[def.Shadow] || def.Shadow == def.Active || def.Kind != KindProtocol) {
			return fmt.Errorf("dump: %s: version %d in shadow does not exist, is active, or is not a protocol's", key, def.Shadow)
		}
	}
	ids := map[string]bool{}
	for _, r := range d.Rollouts {
		if ids[r.ID] || r.Seq == 0 || r.Seq > d.RolloutSeq {
			return fmt.Errorf("dump: rollout %q: repeated or sequence %d out of range", r.ID, r.Seq)
		}
		ids[r.ID] = true
	}
	return nil
}

// Export reads everything in the file, in one read transaction.
func (s *Bolt) Export(ctx context.Context) (*Dump, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	d := &Dump{}
	err := s.db.View(func(tx *bolt.Tx) error {
		if m := tx.Bucket([]byte(bucketMeta)); m != nil {
			d.CreatedAt = string(m.Get([]byte(keyCreatedAt)))
		}
		for _, kind := range Kinds() {
			kb := tx.Bucket([]byte(kind))
			if kb == nil {
				continue
			}
			if err := kb.ForEachBucket(func(k []byte) error {
				nb := kb.Bucket(k)
				def := DumpDef{Kind: kind, Name: string(k), Seq: nb.Sequence(), Active: activeOf(nb), History: historyOf(nb), Shadow: shadowOf(nb)}
				vb, ib := nb.Bucket([]byte(bucketVersions)), nb.Bucket([]byte(bucketInfo))
				if vb == nil || ib == nil {
					return fmt.Errorf("%s/%s: buckets missing", kind, k)
				}
				if err := vb.ForEach(func(vk, body []byte) error {
					v := int(binary.BigEndian.Uint64(vk))
					def.Versions = append(def.Versions, DumpVersion{Version: v, Info: bytes.Clone(ib.Get(vk)), Body: bytes.Clone(body)})
					return nil
				}); err != nil {
					return err
				}
				d.Defs = append(d.Defs, def)
				return nil
			}); err != nil {
				return err
			}
		}
		if rb := tx.Bucket([]byte(bucketRollouts)); rb != nil {
			d.RolloutSeq = rb.Sequence()
			ids := map[uint64]string{}
			if ib := tx.Bucket([]byte(bucketRolloutIDs)); ib != nil {
				_ = ib.ForEach(func(k, v []byte) error {
					if len(v) == 8 {
						ids[binary.BigEndian.Uint64(v)] = string(k)
					}
					return nil
				})
			}
			if err := rb.ForEach(func(k, v []byte) error {
				seq := binary.BigEndian.Uint64(k)
				d.Rollouts = append(d.Rollouts, DumpRollout{Seq: seq, ID: ids[seq], Raw: bytes.Clone(v)})
				return nil
			}); err != nil {
				return err
			}
		}
		if tb := tx.Bucket([]byte(bucketTools)); tb != nil {
			return tb.ForEach(func(k, v []byte) error {
				d.Tools = append(d.Tools, DumpTool{Name: string(k), Raw: bytes.Clone(v)})
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: export %s: %w", s.path, err)
	}
	d.Sort()
	return d, nil
}

// Import replaces everything in the file by d, in one transaction, and notifies the watchers.
func (s *Bolt) Import(ctx context.Context, d *Dump) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := d.Check(); err != nil {
		return fmt.Errorf("store: import into %s: %w", s.path, err)
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		var names [][]byte
		if err := tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			names = append(names, bytes.Clone(name))
			return nil
		}); err != nil {
			return err
		}
		for _, n := range names {
			if err := tx.DeleteBucket(n); err != nil {
				return err
			}
		}
		meta, err := tx.CreateBucket([]byte(bucketMeta))
		if err != nil {
			return err
		}
		for _, name := range []string{string(KindTemplate), string(KindProtocol), bucketRollouts, bucketRolloutIDs, bucketTools} {
			if _, err := tx.CreateBucket([]byte(name)); err != nil {
				return err
			}
		}
		for _, def := range d.Defs {
			nb, err := nameBucket(tx, def.Kind, def.Name, true)
			if err != nil {
				return err
			}
			if err := nb.SetSequence(def.Seq); err != nil {
				return err
			}
			for _, v := range def.Versions {
				if err := nb.Bucket([]byte(bucketVersions)).Put(versionKey(v.Version), bytes.Clone(v.Body)); err != nil {
					return err
				}
				if err := nb.Bucket([]byte(bucketInfo)).Put(versionKey(v.Version), bytes.Clone(v.Info)); err != nil {
					return err
				}
			}
			if err := setActive(nb, def.Active); err != nil {
				return err
			}
			if err := setHistory(nb, def.History); err != nil {
				return err
			}
			if def.Shadow != 0 {
				if err := nb.Put([]byte(keyShadow), versionKey(def.Shadow)); err != nil {
					return err
				}
			}
		}
		rb, ib := tx.Bucket([]byte(bucketRollouts)), tx.Bucket([]byte(bucketRolloutIDs))
		if err := rb.SetSequence(d.RolloutSeq); err != nil {
			return err
		}
		for _, r := range d.Rollouts {
			if err := rb.Put(u64(r.Seq), bytes.Clone(r.Raw)); err != nil {
				return err
			}
			if err := ib.Put([]byte(r.ID), u64(r.Seq)); err != nil {
				return err
			}
		}
		tb := tx.Bucket([]byte(bucketTools))
		for _, t := range d.Tools {
			if err := tb.Put([]byte(t.Name), bytes.Clone(t.Raw)); err != nil {
				return err
			}
		}
		if d.CreatedAt != "" {
			if err := meta.Put([]byte(keyCreatedAt), []byte(d.CreatedAt)); err != nil {
				return err
			}
		}
		return meta.Put([]byte(keySchema), []byte(strconv.Itoa(SchemaVersion)))
	})
	if err != nil {
		return fmt.Errorf("store: import into %s: %w", s.path, err)
	}
	s.notify()
	return nil
}
