package etcdstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	var (
		set             activeSet
		legacy          []*mvccKV
		schema, copying bool
	)
	for _, kv := range r.Kvs {
		key := strings.TrimPrefix(string(kv.Key), s.p)
		val := bytes.Clone(kv.Value)
		bad := func(err error) error { return fmt.Errorf("store: export: key %s: %w", kv.Key, err) }
		switch {
		case key == keySchema:
			schema = true
		case key == keyCopying:
			copying = true
		case key == keyActiveSet:
			a, _, err := decodeSet([]*mvccKV{kv})
			if err != nil {
				return nil, bad(err)
			}
			set = a
		case strings.HasPrefix(key, dirActive), strings.HasPrefix(key, dirHistory):
			legacy = append(legacy, kv)
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
	if copying && !schema {
		return nil, fmt.Errorf("store: export etcd %s%s: %w", s.endpoints, s.p, errCopying(s.p))
	}
	if set == nil {
		// Layout 1 (not migrated yet): the per-name keys. In layout 2 they are left-overs, ignored.
		a, err := s.legacySet(legacy)
		if err != nil {
			return nil, fmt.Errorf("store: export: %w", err)
		}
		set = a
	}
	for _, kind := range store.Kinds() {
		for _, name := range set.sortedNames(kind) {
			p := set.get(kind, name)
			dd := defs[store.Key(kind, name)]
			if dd == nil {
				return nil, fmt.Errorf("store: export: the active set names %s/%s, which has no versions", kind, name)
			}
			dd.Active, dd.History, dd.Shadow = p.Active, append([]int(nil), p.History...), p.Shadow
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

// Interrupted reports whether the prefix holds an unfinished `store copy` (the copying key and no
// schema), which Import may replace without --force.
func (s *Etcd) Interrupted(ctx context.Context) (bool, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tr, err := s.client().Txn(ctx).Then(
		clientv3.OpGet(s.p+keyCopying, clientv3.WithCountOnly()),
		clientv3.OpGet(s.p+keySchema, clientv3.WithCountOnly())).Commit()
	if err != nil {
		return false, fmt.Errorf("store: etcd %s: %w", s.endpoints, err)
	}
	return tr.Responses[0].GetResponseRange().Count > 0 && tr.Responses[1].GetResponseRange().Count == 0, nil
}

// Import replaces everything under the prefix by d, so that readers see the old content, then
// nothing, then all of d: never part of it.
//
//  1. One transaction deletes every key of the prefix and writes the key P copying. From then on a running
//     instance's Snapshot fails (no schema: it keeps serving its last snapshot, degraded) and Open refuses
//     the prefix (errCopying) instead of seeding it.
//  2. The versions, counters, rollouts and tool overrides are written in transactions of importBatch
//     keys, each guarded by P copying being the one step 1 wrote (a second copy started meanwhile stops
//     this one).
//  3. One transaction writes the active set, the creation time and the schema, and deletes P copying: the
//     copy becomes visible, whole, and watchers resync.
//
// An interrupted import leaves P copying and no schema; running it again (Interrupted reports it)
// redoes it from step 1. Watchers are notified.
func (s *Etcd) Import(ctx context.Context, d *store.Dump) error {
	ctx, cancel := s.boundFor(ctx, 12*s.timeout) // many transactions
	defer cancel()
	fail := func(err error) error { return fmt.Errorf("store: import into etcd %s%s: %w", s.endpoints, s.p, err) }
	if err := d.Check(); err != nil {
		return fail(err)
	}
	var ops []clientv3.Op
	put := func(k string, v []byte) { ops = append(ops, clientv3.OpPut(k, string(v))) }
	set := activeSet{}
	for _, def := range d.Defs {
		put(s.kSeq(def.Kind, def.Name), []byte(strconv.FormatUint(def.Seq, 10)))
		for _, v := range def.Versions {
			put(s.kBody(def.Kind, def.Name, v.Version), v.Body)
			put(s.kInfo(def.Kind, def.Name, v.Version), v.Info)
		}
		set.set(def.Kind, def.Name, pointer{Active: def.Active, History: append([]int(nil), def.History...), Shadow: def.Shadow})
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
	final, err := s.setOp(set)
	if err != nil {
		return fail(err)
	}
	marker, err := json.Marshal(map[string]any{"startedAt": time.Now().UTC(), "definitions": len(d.Defs)})
	if err != nil {
		return fail(err)
	}
	copying := s.p + keyCopying
	start, err := s.client().Txn(ctx).Then(
		clientv3.OpDelete(s.p, clientv3.WithRange(copying)),
		clientv3.OpDelete(copying+"\x00", clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.p))),
		clientv3.OpPut(copying, string(marker)),
	).Commit()
	if err != nil {
		return fail(fmt.Errorf("clear the prefix: %w", err))
	}
	markerRev := start.Header.Revision
	guard := clientv3.Compare(clientv3.ModRevision(copying), "=", markerRev)
	lost := fail(errors.New("another `store copy` into this prefix started meanwhile; this one stopped (the other one decides the content)"))
	for len(ops) > 0 {
		n := min(len(ops), importBatch)
		tr, err := s.client().Txn(ctx).If(guard).Then(ops[:n]...).Commit()
		if err != nil {
			return fail(fmt.Errorf("%w (interrupted: run the copy again)", err))
		}
		if !tr.Succeeded {
			return lost
		}
		ops = ops[n:]
	}
	createdAt := d.CreatedAt
	if createdAt == "" {
		createdAt = time.Now().UTC().Format(time.RFC3339Nano)
	}
	tr, err := s.client().Txn(ctx).If(guard).Then(final,
		clientv3.OpPut(s.p+keyCreatedAt, createdAt),
		clientv3.OpPut(s.p+keySchema, strconv.Itoa(schemaVersion)),
		clientv3.OpDelete(copying)).Commit()
	if err != nil {
		return fail(fmt.Errorf("%w (interrupted: run the copy again)", err))
	}
	if !tr.Succeeded {
		return lost
	}
	s.committed(tr.Header.Revision)
	return nil
}
