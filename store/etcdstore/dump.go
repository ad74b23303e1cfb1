package etcdstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/promptgate/promptgate/store"
)

// Empty reports whether no key at all is stored under the prefix.
func (s *Etcd) Empty(ctx context.Context) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := s.client().Get(ctx, s.p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("store: etcd %s: %w", s.endpoints, err)
	}
	return r.Count == 0, nil
}

// Export reads everything under the prefix at one revision.
func (s *Etcd) Export(ctx context.Context) (*store.Dump, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := s.client().Get(ctx, s.p, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: export etcd %s%s: %w", s.endpoints, s.p, err)
	}
	d := &store.Dump{}
	defs := map[string]*store.DumpDef{}
	def := func(kind store.Kind, name string) *store.DumpDef {
		k := store.Key(kind, name)
		if defs[k] == nil {
			defs[k] = &store.DumpDef{Kind: kind, Name: name}
		}
		return defs[k]
	}
	versions := map[string]map[int]*store.DumpVersion{}
	version := func(kind store.Kind, name string, v int) *store.DumpVersion {
		k := store.Key(kind, name)
		if versions[k] == nil {
			versions[k] = map[int]*store.DumpVersion{}
		}
		if versions[k][v] == nil {
			versions[k][v] = &store.DumpVersion{Version: v}
		}
		return versions[k][v]
	}
	ids := map[uint64]string{}
	for _, kv := range r.Kvs {
		key := strings.TrimPrefix(string(kv.Key), s.p)
		val := bytes.Clone(kv.Value)
		bad := func(err error) error { return fmt.Errorf("store: export: key %s: %w", kv.Key, err) }
		switch {
		case key == keySchema:
		case key == keyCreatedAt:
			d.CreatedAt = string(val)
		case key == keyRolloutSeq:
			n, err := strconv.ParseUint(string(val), 10, 64)
			if err != nil {
				return nil, bad(err)
			}
			d.RolloutSeq = n
		case strings.HasPrefix(key, dirRollouts):
			n, err := strconv.ParseUint(strings.TrimPrefix(key, dirRollouts), 10, 64)
			if err != nil {
				return nil, bad(err)
			}
			d.Rollouts = append(d.Rollouts, store.DumpRollout{Seq: n, Raw: val})
		case strings.HasPrefix(key, dirRolloutIDs):
			n, err := strconv.ParseUint(string(val), 10, 64)
			if err != nil {
				return nil, bad(err)
			}
			ids[n] = strings.TrimPrefix(key, dirRolloutIDs)
		case strings.HasPrefix(key, dirTools):
			d.Tools = append(d.Tools, store.DumpTool{Name: strings.TrimPrefix(key, dirTools), Raw: val})
		default:
			dir, rest, _ := strings.Cut(key, "/")
			kindName, rest, _ := strings.Cut(rest, "/")
			kind := store.Kind(kindName)
			if !kind.Valid() {
				return nil, bad(fmt.Errorf("not a promptgate key"))
			}
			name, ver, hasVer := strings.Cut(rest, "/")
			switch dir + "/" {
			case dirSeq:
				n, err := strconv.ParseUint(string(val), 10, 64)
				if err != nil {
					return nil, bad(err)
				}
				def(kind, name).Seq = n
			case dirActive:
				n, err := strconv.Atoi(string(val))
				if err != nil {
					return nil, bad(err)
				}
				def(kind, name).Active = n
			case dirHistory:
				var h []int
				if err := json.Unmarshal(val, &h); err != nil {
					return nil, bad(err)
				}
				def(kind, name).History = h
			case dirVersions, dirInfo:
				n, err := strconv.Atoi(ver)
				if !hasVer || err != nil {
					return nil, bad(fmt.Errorf("bad version"))
				}
				def(kind, name)
				if dir+"/" == dirVersions {
					version(kind, name, n).Body = val
				} else {
					version(kind, name, n).Info = val
				}
			default:
				return nil, bad(fmt.Errorf("not a promptgate key"))
			}
		}
	}
	for k, dd := range defs {
		for _, v := range versions[k] {
			dd.Versions = append(dd.Versions, *v)
		}
		d.Defs = append(d.Defs, *dd)
	}
	for i := range d.Rollouts {
		d.Rollouts[i].ID = ids[d.Rollouts[i].Seq]
	}
	d.Sort()
	return d, nil
}

// importBatch keeps each transaction of Import under etcd's default --max-txn-ops (128).
const importBatch = 100

// Import replaces everything under the prefix by d: it deletes the prefix, then writes d in
// transactions of at most importBatch keys, the schema key last. An interrupted import leaves a prefix
// without schema key: run it again (with --force). Watchers are notified.
func (s *Etcd) Import(ctx context.Context, d *store.Dump) error {
	ctx, cancel := s.boundFor(ctx, 12*s.timeout) // many transactions
	defer cancel()
	if err := d.Check(); err != nil {
		return fmt.Errorf("store: import into etcd %s%s: %w", s.endpoints, s.p, err)
	}
	var ops []clientv3.Op
	put := func(k string, v []byte) { ops = append(ops, clientv3.OpPut(k, string(v))) }
	for _, def := range d.Defs {
		put(s.kSeq(def.Kind, def.Name), []byte(strconv.FormatUint(def.Seq, 10)))
		for _, v := range def.Versions {
			put(s.kBody(def.Kind, def.Name, v.Version), v.Body)
			put(s.kInfo(def.Kind, def.Name, v.Version), v.Info)
		}
		if def.Active != 0 {
			put(s.kActive(def.Kind, def.Name), []byte(strconv.Itoa(def.Active)))
		}
		if len(def.History) > 0 {
			ops = append(ops, historyOp(s.kHistory(def.Kind, def.Name), def.History))
		}
	}
	if d.RolloutSeq > 0 {
		put(s.p+keyRolloutSeq, []byte(strconv.FormatUint(d.RolloutSeq, 10)))
	}
	for _, r := range d.Rollouts {
		put(s.kRollout(r.Seq), r.Raw)
		put(s.kRolloutID(r.ID), []byte(strconv.FormatUint(r.Seq, 10)))
	}
	for _, t := range d.Tools {
		put(s.kTool(t.Name), t.Raw)
	}
	if d.CreatedAt != "" {
		put(s.p+keyCreatedAt, []byte(d.CreatedAt))
	}
	if _, err := s.client().Delete(ctx, s.p, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("store: import into etcd %s%s: clear the prefix: %w", s.endpoints, s.p, err)
	}
	var rev int64
	for len(ops) > 0 {
		n := min(len(ops), importBatch)
		tr, err := s.client().Txn(ctx).Then(ops[:n]...).Commit()
		if err != nil {
			return fmt.Errorf("store: import into etcd %s%s: %w", s.endpoints, s.p, err)
		}
		rev = tr.Header.Revision
		ops = ops[n:]
	}
	r, err := s.client().Put(ctx, s.p+keySchema, strconv.Itoa(store.SchemaVersion))
	if err != nil {
		return fmt.Errorf("store: import into etcd %s%s: %w", s.endpoints, s.p, err)
	}
	rev = max(rev, r.Header.Revision)
	s.committed(rev)
	return nil
}
