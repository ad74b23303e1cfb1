package etcdstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/promptgate/promptgate/store"
)

type mvccKV = mvccpb.KeyValue

// readRecord reads one version at revision rev (0 = now).
func (s *Etcd) readRecord(ctx context.Context, kind store.Kind, name string, v int, rev int64) (store.Record, error) {
	if v < 1 {
		return store.Record{}, fmt.Errorf("%s/%s@%d: %w", kind, name, v, store.ErrNotFound)
	}
	var opts []clientv3.OpOption
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	tr, err := s.client().Txn(ctx).Then(clientv3.OpGet(s.kBody(kind, name, v), opts...), clientv3.OpGet(s.kInfo(kind, name, v), opts...)).Commit()
	if err != nil {
		return store.Record{}, err
	}
	body, info := tr.Responses[0].GetResponseRange().Kvs, tr.Responses[1].GetResponseRange().Kvs
	if len(body) == 0 {
		return store.Record{}, fmt.Errorf("%s/%s@%d: %w", kind, name, v, store.ErrNotFound)
	}
	if len(info) == 0 {
		return store.Record{}, fmt.Errorf("%s/%s: version %d: info missing", kind, name, v)
	}
	vi, err := decodeInfo(info[0].Value, v)
	if err != nil {
		return store.Record{}, fmt.Errorf("%s/%s: %w", kind, name, err)
	}
	return store.Record{Kind: kind, Name: name, Version: v, CreatedAt: vi.CreatedAt, Author: vi.Author, Note: vi.Note, Body: bytes.Clone(body[0].Value)}, nil
}

// Active implements store.Store.
func (s *Etcd) Active(ctx context.Context, kind store.Kind, name string) (store.Record, error) {
	if err := precheck(ctx, kind); err != nil {
		return store.Record{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkName(kind, name); err != nil {
		return store.Record{}, fmt.Errorf("store: %w", err)
	}
	tr, err := s.client().Txn(ctx).Then(clientv3.OpGet(s.p+keyActiveSet), clientv3.OpGet(s.kSeq(kind, name), clientv3.WithCountOnly())).Commit()
	if err != nil {
		return store.Record{}, fmt.Errorf("store: %s/%s: %w", kind, name, err)
	}
	if tr.Responses[1].GetResponseRange().Count == 0 {
		return store.Record{}, fmt.Errorf("store: %s/%s: %w", kind, name, store.ErrNotFound)
	}
	set, _, err := decodeSet(tr.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return store.Record{}, fmt.Errorf("store: %w", err)
	}
	v := set.get(kind, name).Active
	if v == 0 {
		return store.Record{}, fmt.Errorf("store: %s/%s: no active version: %w", kind, name, store.ErrNotFound)
	}
	rec, err := s.readRecord(ctx, kind, name, v, tr.Header.Revision)
	if err != nil {
		return store.Record{}, fmt.Errorf("store: %w", err)
	}
	return rec, nil
}

// Get implements store.Store.
func (s *Etcd) Get(ctx context.Context, kind store.Kind, name string, version int) (store.Record, error) {
	if err := precheck(ctx, kind); err != nil {
		return store.Record{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkName(kind, name); err != nil {
		return store.Record{}, fmt.Errorf("store: %w", err)
	}
	rec, err := s.readRecord(ctx, kind, name, version, 0)
	if err != nil {
		return store.Record{}, fmt.Errorf("store: %w", err)
	}
	return rec, nil
}

// List implements store.Store.
func (s *Etcd) List(ctx context.Context, kind store.Kind) ([]store.Entry, error) {
	if err := precheck(ctx, kind); err != nil {
		return nil, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	tr, err := s.client().Txn(ctx).Then(
		clientv3.OpGet(s.p+dirSeq+string(kind)+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		clientv3.OpGet(s.p+keyActiveSet),
		clientv3.OpGet(s.p+dirInfo+string(kind)+"/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", kind, err)
	}
	byName := map[string]*store.Entry{}
	out := []store.Entry{}
	names := []string{}
	seqDir := s.p + dirSeq + string(kind) + "/"
	for _, kv := range tr.Responses[0].GetResponseRange().Kvs {
		n := strings.TrimPrefix(string(kv.Key), seqDir)
		names = append(names, n)
		byName[n] = &store.Entry{Name: n, Versions: []store.VersionInfo{}}
	}
	set, _, err := decodeSet(tr.Responses[1].GetResponseRange().Kvs)
	if err != nil {
		return nil, fmt.Errorf("store: list %s: %w", kind, err)
	}
	for n, e := range byName {
		p := set.get(kind, n)
		e.Active, e.RollbackTo, e.Shadow = p.Active, store.RollbackTarget(p.Active, p.History), p.Shadow
	}
	infoDir := s.p + dirInfo + string(kind) + "/"
	for _, kv := range tr.Responses[2].GetResponseRange().Kvs {
		rest := strings.TrimPrefix(string(kv.Key), infoDir)
		n, _, _ := strings.Cut(rest, "/")
		e := byName[n]
		if e == nil {
			continue
		}
		v, err := versionOfKey(kv.Key)
		if err != nil {
			return nil, fmt.Errorf("store: list %s: %w", kind, err)
		}
		info, err := decodeInfo(kv.Value, v)
		if err != nil {
			return nil, fmt.Errorf("store: list %s: %s/%s: %w", kind, kind, n, err)
		}
		e.Versions = append(e.Versions, info)
	}
	sort.Strings(names)
	for _, n := range names {
		out = append(out, *byName[n])
	}
	return out, nil
}

// Entry implements store.Store.
func (s *Etcd) Entry(ctx context.Context, kind store.Kind, name string) (store.Entry, error) {
	if err := precheck(ctx, kind); err != nil {
		return store.Entry{}, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkName(kind, name); err != nil {
		return store.Entry{}, fmt.Errorf("store: %w", err)
	}
	tr, err := s.client().Txn(ctx).Then(
		clientv3.OpGet(s.kSeq(kind, name), clientv3.WithCountOnly()),
		clientv3.OpGet(s.p+keyActiveSet),
		clientv3.OpGet(s.p+dirInfo+string(kind)+"/"+name+"/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return store.Entry{}, fmt.Errorf("store: %s/%s: %w", kind, name, err)
	}
	if tr.Responses[0].GetResponseRange().Count == 0 {
		return store.Entry{}, fmt.Errorf("store: %s/%s: %w", kind, name, store.ErrNotFound)
	}
	e := store.Entry{Name: name, Versions: []store.VersionInfo{}}
	set, _, err := decodeSet(tr.Responses[1].GetResponseRange().Kvs)
	if err != nil {
		return store.Entry{}, fmt.Errorf("store: %w", err)
	}
	p := set.get(kind, name)
	e.Active, e.RollbackTo, e.Shadow = p.Active, store.RollbackTarget(p.Active, p.History), p.Shadow
	for _, kv := range tr.Responses[2].GetResponseRange().Kvs {
		v, err := versionOfKey(kv.Key)
		if err != nil {
			return store.Entry{}, fmt.Errorf("store: %w", err)
		}
		info, err := decodeInfo(kv.Value, v)
		if err != nil {
			return store.Entry{}, fmt.Errorf("store: %s/%s: %w", kind, name, err)
		}
		e.Versions = append(e.Versions, info)
	}
	return e, nil
}

// AddVersion implements store.Store. The version counter is compare-and-swapped: concurrent writers
// each get their own number, none is lost.
func (s *Etcd) AddVersion(ctx context.Context, kind store.Kind, body []byte, author, note string) (int, error) {
	if err := precheck(ctx, kind); err != nil {
		return 0, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	name, err := s.check(kind, body)
	if err != nil {
		return 0, err
	}
	if s.links != nil {
		r, err := s.client().Get(ctx, s.p+keyActiveSet)
		if err != nil {
			return 0, fmt.Errorf("store: add version of %s/%s: %w", kind, name, err)
		}
		set, _, err := decodeSet(r.Kvs)
		if err != nil {
			return 0, fmt.Errorf("store: add version of %s/%s: %w", kind, name, err)
		}
		if err := s.checkLinks(ctx, set, map[string][]byte{store.Key(kind, name): body}); err != nil {
			return 0, fmt.Errorf("store: add version of %s/%s: %w", kind, name, err)
		}
	}
	body = bytes.Clone(body)
	for {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("store: %w", err)
		}
		r, err := s.client().Get(ctx, s.kSeq(kind, name))
		if err != nil {
			return 0, fmt.Errorf("store: add version of %s/%s: %w", kind, name, err)
		}
		last, modRev, err := intOf(r.Kvs)
		if err != nil {
			return 0, fmt.Errorf("store: add version of %s/%s: %w", kind, name, err)
		}
		v := last + 1
		info, err := json.Marshal(store.VersionInfo{Version: v, CreatedAt: time.Now().UTC(), Author: author, Note: note})
		if err != nil {
			return 0, fmt.Errorf("store: %w", err)
		}
		tr, err := s.client().Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(s.kSeq(kind, name)), "=", modRev)).
			Then(clientv3.OpPut(s.kSeq(kind, name), strconv.Itoa(v)),
				clientv3.OpPut(s.kBody(kind, name, v), string(body)),
				clientv3.OpPut(s.kInfo(kind, name, v), string(info))).Commit()
		if err != nil {
			return 0, fmt.Errorf("store: add version of %s/%s: %w", kind, name, err)
		}
		if !tr.Succeeded {
			continue // another writer took this number
		}
		s.log.Info("store: version added", "kind", kind, "name", name, "version", v, "author", author)
		s.committed(tr.Header.Revision)
		return v, nil
	}
}

// readSet reads the active set and, in the same transaction, whether name has versions and whether
// version want exists (want 0: skip).
func (s *Etcd) readSet(ctx context.Context, kind store.Kind, name string, want int) (set activeSet, setRev int64, exists, has bool, err error) {
	ops := []clientv3.Op{
		clientv3.OpGet(s.p + keyActiveSet),
		clientv3.OpGet(s.kSeq(kind, name), clientv3.WithCountOnly()),
	}
	if want > 0 {
		ops = append(ops, clientv3.OpGet(s.kBody(kind, name, want), clientv3.WithCountOnly()))
	}
	tr, err := s.client().Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, 0, false, false, err
	}
	if set, setRev, err = decodeSet(tr.Responses[0].GetResponseRange().Kvs); err != nil {
		return nil, 0, false, false, err
	}
	exists = tr.Responses[1].GetResponseRange().Count > 0
	has = want > 0 && tr.Responses[2].GetResponseRange().Count > 0
	return set, setRev, exists, has, nil
}

// Activate implements store.Store: one transaction, compare-and-swap on the active set; when
// another change won the race, this one is applied on top of it (both stay in history), and the
// version returned as previous is the one this transaction replaced.
func (s *Etcd) Activate(ctx context.Context, kind store.Kind, name string, version int) (int, error) {
	return s.activate(ctx, kind, name, version, -1)
}

// ActivateIf implements store.Store: Activate, compared with expected in the transaction's read.
func (s *Etcd) ActivateIf(ctx context.Context, kind store.Kind, name string, version, expected int) error {
	_, err := s.activate(ctx, kind, name, version, max(expected, 0))
	return err
}

// activate moves the active pointer of kind/name to version, where expected is negative or the
// active one.
func (s *Etcd) activate(ctx context.Context, kind store.Kind, name string, version, expected int) (int, error) {
	if err := precheck(ctx, kind); err != nil {
		return 0, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkName(kind, name); err != nil {
		return 0, fmt.Errorf("store: activate: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("store: %w", err)
		}
		set, setRev, exists, has, err := s.readSet(ctx, kind, name, version)
		if err != nil {
			return 0, fmt.Errorf("store: activate: %s/%s: %w", kind, name, err)
		}
		if !exists {
			return 0, fmt.Errorf("store: activate: %s/%s: %w", kind, name, store.ErrNotFound)
		}
		if !has {
			return 0, fmt.Errorf("store: activate: %s/%s@%d: %w", kind, name, version, store.ErrNotFound)
		}
		if cur := set.get(kind, name).Active; expected >= 0 && cur != expected {
			return 0, fmt.Errorf("store: activate: %s/%s: version %d is active, not %d: %w", kind, name, cur, expected, store.ErrConflict)
		}
		prev := set.move(kind, name, version)
		if prev == version {
			return prev, nil
		}
		if err := s.checkLinks(ctx, set, nil, store.Key(kind, name)); err != nil {
			return 0, fmt.Errorf("store: activate: %s/%s: %w", kind, name, err)
		}
		rev, ok, err := s.putSet(ctx, set, setRev)
		if err != nil {
			return 0, fmt.Errorf("store: activate: %s/%s: %w", kind, name, err)
		}
		if !ok {
			continue
		}
		s.log.Info("store: version activated", "kind", kind, "name", name, "version", version, "previous", prev)
		s.committed(rev)
		return prev, nil
	}
}

// Rollback implements store.Store.
func (s *Etcd) Rollback(ctx context.Context, kind store.Kind, name string) (int, int, error) {
	if err := precheck(ctx, kind); err != nil {
		return 0, 0, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkName(kind, name); err != nil {
		return 0, 0, fmt.Errorf("store: rollback: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, 0, fmt.Errorf("store: %w", err)
		}
		set, setRev, exists, _, err := s.readSet(ctx, kind, name, 0)
		if err != nil {
			return 0, 0, fmt.Errorf("store: rollback: %s/%s: %w", kind, name, err)
		}
		if !exists {
			return 0, 0, fmt.Errorf("store: rollback: %s/%s: %w", kind, name, store.ErrNotFound)
		}
		p := set.get(kind, name)
		hist := p.History
		for len(hist) > 0 && hist[len(hist)-1] == p.Active {
			hist = hist[:len(hist)-1]
		}
		if len(hist) == 0 {
			return 0, 0, fmt.Errorf("store: rollback: %s/%s: from version %d: %w", kind, name, p.Active, store.ErrNoPreviousVersion)
		}
		to := hist[len(hist)-1]
		set.set(kind, name, pointer{Active: to, History: append([]int(nil), hist[:len(hist)-1]...), Shadow: p.Shadow})
		if err := s.checkLinks(ctx, set, nil, store.Key(kind, name)); err != nil {
			return 0, 0, fmt.Errorf("store: rollback: %s/%s: %w", kind, name, err)
		}
		rev, ok, err := s.putSet(ctx, set, setRev)
		if err != nil {
			return 0, 0, fmt.Errorf("store: rollback: %s/%s: %w", kind, name, err)
		}
		if !ok {
			continue
		}
		s.log.Info("store: rolled back", "kind", kind, "name", name, "version", to, "from", p.Active)
		s.committed(rev)
		return to, p.Active, nil
	}
}

// Snapshot implements store.Store: every active record at one etcd revision. While etcd is
// unreachable it fails (callers keep what they have), except before the first read from etcd, when
// the snapshot file Open loaded is returned.
func (s *Etcd) Snapshot(ctx context.Context) (store.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return store.Snapshot{}, fmt.Errorf("store: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	snap, rev, err := s.readSnapshot(ctx)
	if err != nil {
		if !s.synced.Load() && s.fallback != nil {
			return *s.fallback, nil
		}
		return store.Snapshot{}, fmt.Errorf("store: snapshot from etcd %s: %w", s.endpoints, err)
	}
	s.synced.Store(true)
	if s.snapFile != "" {
		if err := s.writeSnapshotFile(snap, rev); err != nil {
			s.log.Error("store: write the snapshot file", "file", s.snapFile, "err", err)
		}
	}
	return snap, nil
}

func (s *Etcd) readSnapshot(ctx context.Context) (store.Snapshot, int64, error) {
	snap := store.NewSnapshot()
	tr, err := s.client().Txn(ctx).Then(
		clientv3.OpGet(s.p+keyActiveSet),
		clientv3.OpGet(s.p+dirTools, clientv3.WithPrefix()),
		clientv3.OpGet(s.p+keySchema),
	).Commit()
	if err != nil {
		return snap, 0, err
	}
	rev := tr.Header.Revision
	if kvs := tr.Responses[2].GetResponseRange().Kvs; len(kvs) == 0 || string(kvs[0].Value) != strconv.Itoa(schemaVersion) {
		// Being copied into (no schema yet), or still of layout 1: nothing to serve from it.
		return snap, 0, fmt.Errorf("prefix %s holds no promptgate definitions of layout %d (a store copy running? an older release?)", s.p, schemaVersion)
	}
	for _, kv := range tr.Responses[1].GetResponseRange().Kvs {
		var o store.ToolOverride
		name := strings.TrimPrefix(string(kv.Key), s.p+dirTools)
		if err := json.Unmarshal(kv.Value, &o); err != nil {
			return snap, 0, fmt.Errorf("tool override %q: %w", name, err)
		}
		snap.Tools[name] = o
	}
	set, _, err := decodeSet(tr.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return snap, 0, err
	}
	var want, shadows []store.Record
	for _, kind := range store.Kinds() {
		for _, name := range set.sortedNames(kind) {
			p := set.get(kind, name)
			if p.Active > 0 {
				want = append(want, store.Record{Kind: kind, Name: name, Version: p.Active})
			}
			if p.Shadow > 0 && kind == store.KindProtocol {
				shadows = append(shadows, store.Record{Kind: kind, Name: name, Version: p.Shadow})
			}
		}
	}
	recs, err := s.readRecords(ctx, append(want, shadows...), rev)
	if err != nil {
		return snap, 0, err
	}
	for i, rec := range recs {
		if i >= len(want) {
			snap.Shadows[rec.Name] = rec
			continue
		}
		snap.Of(rec.Kind)[rec.Name] = rec
	}
	return snap, rev, nil
}

// readRecords reads the versions named by want (Kind, Name, Version) at revision rev, in
// transactions of at most maxTxnOps reads.
func (s *Etcd) readRecords(ctx context.Context, want []store.Record, rev int64) ([]store.Record, error) {
	out := make([]store.Record, 0, len(want))
	for len(want) > 0 {
		n := min(len(want), maxTxnOps/2)
		ops := make([]clientv3.Op, 0, 2*n)
		for _, w := range want[:n] {
			ops = append(ops, clientv3.OpGet(s.kBody(w.Kind, w.Name, w.Version), clientv3.WithRev(rev)),
				clientv3.OpGet(s.kInfo(w.Kind, w.Name, w.Version), clientv3.WithRev(rev)))
		}
		tr, err := s.client().Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		for i, w := range want[:n] {
			body, info := tr.Responses[2*i].GetResponseRange().Kvs, tr.Responses[2*i+1].GetResponseRange().Kvs
			if len(body) == 0 || len(info) == 0 {
				return nil, fmt.Errorf("%s/%s: active version %d is missing", w.Kind, w.Name, w.Version)
			}
			vi, err := decodeInfo(info[0].Value, w.Version)
			if err != nil {
				return nil, fmt.Errorf("%s/%s: %w", w.Kind, w.Name, err)
			}
			out = append(out, store.Record{Kind: w.Kind, Name: w.Name, Version: w.Version, CreatedAt: vi.CreatedAt, Author: vi.Author, Note: vi.Note, Body: bytes.Clone(body[0].Value)})
		}
		want = want[n:]
	}
	return out, nil
}

type rolloutItem struct {
	kind store.Kind
	name string
	body []byte
}

// checkRollout runs every check on r (structure and the Validate hook) and returns its definitions
// in the order they are applied (templates, then protocols).
func (s *Etcd) checkRollout(r store.Rollout) ([]rolloutItem, error) {
	data, err := json.Marshal(store.Rollout{ID: r.ID, Templates: r.Templates, Protocols: r.Protocols})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", store.ErrInvalid, err)
	}
	if _, err := store.ParseRollout(data); err != nil { // id, structure, duplicates
		return nil, err
	}
	var items []rolloutItem
	for _, g := range []struct {
		kind  store.Kind
		bodys []json.RawMessage
	}{{store.KindTemplate, r.Templates}, {store.KindProtocol, r.Protocols}} {
		for i, body := range g.bodys {
			name, err := s.check(g.kind, body)
			if err != nil {
				return nil, fmt.Errorf("%s[%d]: %w", g.kind, i, err)
			}
			items = append(items, rolloutItem{g.kind, name, bytes.Clone(body)})
		}
	}
	return items, nil
}

// versionBatch bounds the versions one transaction of storeVersions writes: 3 operations each, and
// at most versionBatchBytes of bodies (etcd's default --max-request-bytes is 1.5 MiB).
const (
	versionBatch      = maxTxnOps / 3
	versionBatchBytes = 512 << 10
)

// storeVersions stores every item as the next version of its name, in transactions of at most
// versionBatch items, each guarded by compare-and-swap on the version counters it read (a batch
// that lost a race is read and written again), and returns the versions, in the order of items. It
// activates nothing.
func (s *Etcd) storeVersions(ctx context.Context, items []rolloutItem, author, note string, at time.Time) ([]int, error) {
	out := make([]int, 0, len(items))
	for len(items) > 0 {
		n, size := 0, 0
		for n < len(items) && n < versionBatch && (n == 0 || size+len(items[n].body) <= versionBatchBytes) {
			size += len(items[n].body)
			n++
		}
		batch := items[:n]
		for {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			gets := make([]clientv3.Op, 0, n)
			for _, it := range batch {
				gets = append(gets, clientv3.OpGet(s.kSeq(it.kind, it.name)))
			}
			rt, err := s.client().Txn(ctx).Then(gets...).Commit()
			if err != nil {
				return nil, err
			}
			cmps := make([]clientv3.Cmp, 0, n)
			ops := make([]clientv3.Op, 0, 3*n)
			vs := make([]int, 0, n)
			for i, it := range batch {
				last, lastRev, err := intOf(rt.Responses[i].GetResponseRange().Kvs)
				if err != nil {
					return nil, err
				}
				v := last + 1
				info, err := json.Marshal(store.VersionInfo{Version: v, CreatedAt: at, Author: author, Note: note})
				if err != nil {
					return nil, err
				}
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.kSeq(it.kind, it.name)), "=", lastRev))
				ops = append(ops,
					clientv3.OpPut(s.kSeq(it.kind, it.name), strconv.Itoa(v)),
					clientv3.OpPut(s.kBody(it.kind, it.name, v), string(it.body)),
					clientv3.OpPut(s.kInfo(it.kind, it.name, v), string(info)))
				vs = append(vs, v)
			}
			tr, err := s.client().Txn(ctx).If(cmps...).Then(ops...).Commit()
			if err != nil {
				return nil, err
			}
			if tr.Succeeded {
				out = append(out, vs...)
				break
			}
		}
		items = items[n:]
	}
	return out, nil
}

// ApplyRollout implements store.Store, for a rollout of any size, in two steps. First every
// definition is stored as a new version (storeVersions: immutable keys, several transactions when
// there are many; they activate nothing, so no instance serves them yet). Then one transaction
// moves every active pointer, records the rollout and takes its id, by compare-and-swap on the
// active set, the rollout counter and the id's absence: that transaction is the rollout, and
// watchers see all of it or nothing.
//
// When the second step cannot happen (the same id applied meanwhile by someone else, etcd lost, the
// context ended), the versions of the first step stay as inactive versions with the rollout id as
// their note, like versions added and never activated. They are not garbage-collected: versions are
// never deleted (their numbers are history), they cost a few keys, and nothing serves them unless
// someone activates them by number. Applying the rollout again stores fresh versions.
func (s *Etcd) ApplyRollout(ctx context.Context, r store.Rollout) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	items, err := s.checkRollout(r)
	if err != nil {
		return fmt.Errorf("store: rollout %q: %w", r.ID, err)
	}
	ctx, cancel := s.boundFor(ctx, s.timeout*time.Duration(2+len(items)/versionBatch))
	defer cancel()
	head, err := s.client().Get(ctx, s.kRolloutID(r.ID), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("store: rollout %q: %w", r.ID, err)
	}
	if head.Count > 0 {
		return fmt.Errorf("store: rollout %q: %w", r.ID, store.ErrAlreadyApplied)
	}
	proposed := make(map[string][]byte, len(items))
	for _, it := range items {
		proposed[store.Key(it.kind, it.name)] = it.body
	}
	if s.links != nil {
		// Checked before any version is stored, and again on the active set the rollout swaps in.
		gr, err := s.client().Get(ctx, s.p+keyActiveSet)
		if err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
		set, _, err := decodeSet(gr.Kvs)
		if err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
		if err := s.checkLinks(ctx, set, proposed); err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
	}
	now := time.Now().UTC()
	vs, err := s.storeVersions(ctx, items, store.RolloutAuthor, r.ID, now)
	if err != nil {
		return fmt.Errorf("store: rollout %q: store its versions: %w", r.ID, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("store: rollout %q: %w (its versions are stored, inactive; apply it again)", r.ID, err)
		}
		rt, err := s.client().Txn(ctx).Then(
			clientv3.OpGet(s.kRolloutID(r.ID), clientv3.WithCountOnly()),
			clientv3.OpGet(s.p+keyRolloutSeq),
			clientv3.OpGet(s.p+keyActiveSet)).Commit()
		if err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
		if rt.Responses[0].GetResponseRange().Count > 0 {
			s.log.Warn("store: rollout applied meanwhile by another writer; the versions this attempt stored stay inactive", "id", r.ID)
			return fmt.Errorf("store: rollout %q: %w", r.ID, store.ErrAlreadyApplied)
		}
		seq, seqRev, err := intOf(rt.Responses[1].GetResponseRange().Kvs)
		if err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
		set, setRev, err := decodeSet(rt.Responses[2].GetResponseRange().Kvs)
		if err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
		applied := store.AppliedRollout{ID: r.ID, AppliedAt: now, Previous: map[string]int{}, Activated: map[string]int{}}
		for i, it := range items {
			applied.Previous[store.Key(it.kind, it.name)] = set.move(it.kind, it.name, vs[i])
			applied.Activated[store.Key(it.kind, it.name)] = vs[i]
		}
		if err := s.checkLinks(ctx, set, proposed); err != nil {
			return fmt.Errorf("store: rollout %q: %w (its versions are stored, inactive)", r.ID, err)
		}
		rec, err := json.Marshal(applied)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		put, err := s.setOp(set)
		if err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
		seq++
		tr, err := s.client().Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(s.kRolloutID(r.ID)), "=", 0),
			clientv3.Compare(clientv3.ModRevision(s.p+keyRolloutSeq), "=", seqRev),
			s.setGuard(setRev),
		).Then(
			put,
			clientv3.OpPut(s.p+keyRolloutSeq, strconv.Itoa(seq)),
			clientv3.OpPut(s.kRollout(uint64(seq)), string(rec)),
			clientv3.OpPut(s.kRolloutID(r.ID), strconv.Itoa(seq)),
		).Commit()
		if err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
		if !tr.Succeeded {
			continue
		}
		s.log.Info("store: rollout applied", "id", r.ID, "definitions", len(items), "activated", applied.Activated)
		s.committed(tr.Header.Revision)
		return nil
	}
}

// existing reports which of keys exist, reading them in transactions of at most maxTxnOps.
func (s *Etcd) existing(ctx context.Context, keys []string) (map[string]bool, error) {
	out := map[string]bool{}
	for len(keys) > 0 {
		n := min(len(keys), maxTxnOps)
		ops := make([]clientv3.Op, 0, n)
		for _, k := range keys[:n] {
			ops = append(ops, clientv3.OpGet(k, clientv3.WithCountOnly()))
		}
		tr, err := s.client().Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		for i, k := range keys[:n] {
			out[k] = tr.Responses[i].GetResponseRange().Count > 0
		}
		keys = keys[n:]
	}
	return out, nil
}

// RevertLast implements store.Store: one transaction, by compare-and-swap on the active set and the
// rollout's record, whatever the rollout's size.
func (s *Etcd) RevertLast(ctx context.Context) (store.AppliedRollout, error) {
	if err := ctx.Err(); err != nil {
		return store.AppliedRollout{}, fmt.Errorf("store: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for {
		if err := ctx.Err(); err != nil {
			return store.AppliedRollout{}, fmt.Errorf("store: %w", err)
		}
		rt, err := s.client().Txn(ctx).Then(
			clientv3.OpGet(s.p+dirRollouts, append(clientv3.WithLastKey(), clientv3.WithPrefix())...),
			clientv3.OpGet(s.p+keyActiveSet)).Commit()
		if err != nil {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %w", err)
		}
		last := rt.Responses[0].GetResponseRange().Kvs
		if len(last) == 0 {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %w", store.ErrNothingToRevert)
		}
		kv := last[0]
		var ar store.AppliedRollout
		if err := json.Unmarshal(kv.Value, &ar); err != nil {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: decode %s: %w", kv.Key, err)
		}
		set, setRev, err := decodeSet(rt.Responses[1].GetResponseRange().Kvs)
		if err != nil {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %w", err)
		}
		keys := make([]string, 0, len(ar.Previous))
		for key := range ar.Previous {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		var probe []string
		for _, key := range keys {
			kindName, name, ok := strings.Cut(key, "/")
			kind := store.Kind(kindName)
			if !ok || !kind.Valid() || !store.ValidName(name) {
				return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: applied rollout %q: bad key %q", ar.ID, key)
			}
			probe = append(probe, s.kSeq(kind, name))
			if prev := ar.Previous[key]; prev != 0 {
				probe = append(probe, s.kBody(kind, name, prev))
			}
		}
		has, err := s.existing(ctx, probe)
		if err != nil {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %w", err)
		}
		var moved []string
		for _, key := range keys {
			kindName, name, _ := strings.Cut(key, "/")
			kind := store.Kind(kindName)
			prev, activated := ar.Previous[key], ar.Activated[key]
			if !has[s.kSeq(kind, name)] {
				return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %s/%s: %w", kind, name, store.ErrNotFound)
			}
			if prev != 0 && !has[s.kBody(kind, name, prev)] {
				return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %s: version %d to re-activate: %w", key, prev, store.ErrNotFound)
			}
			p := set.get(kind, name)
			hist := append([]int(nil), p.History...)
			if p.Active == activated && (prev == 0 || (len(hist) > 0 && hist[len(hist)-1] == prev)) {
				// Nothing moved since the rollout: undo its activation, history included.
				if prev != 0 {
					hist = hist[:len(hist)-1]
				}
				set.set(kind, name, pointer{Active: prev, History: hist, Shadow: p.Shadow})
				continue
			}
			// Someone activated another version since: still restore exactly Previous, as a new
			// activation, so that Rollback can return to what they had chosen.
			moved = append(moved, key)
			set.move(kind, name, prev)
		}
		if err := s.checkLinks(ctx, set, nil, keys...); err != nil {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout %q: %w", ar.ID, err)
		}
		put, err := s.setOp(set)
		if err != nil {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %w", err)
		}
		tr, err := s.client().Txn(ctx).If(
			clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision),
			s.setGuard(setRev),
		).Then(put, clientv3.OpDelete(string(kv.Key)), clientv3.OpDelete(s.kRolloutID(ar.ID))).Commit()
		if err != nil {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %w", err)
		}
		if !tr.Succeeded {
			continue
		}
		if len(moved) > 0 {
			s.log.Warn("store: reverted rollout had been changed by hand since; restored its previous versions anyway", "id", ar.ID, "names", moved)
		}
		s.log.Info("store: rollout reverted", "id", ar.ID, "restored", ar.Previous)
		s.committed(tr.Header.Revision)
		return ar, nil
	}
}

// Rollouts implements store.Store.
func (s *Etcd) Rollouts(ctx context.Context) ([]store.AppliedRollout, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := s.client().Get(ctx, s.p+dirRollouts, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("store: rollouts: %w", err)
	}
	out := []store.AppliedRollout{}
	for _, kv := range r.Kvs {
		var ar store.AppliedRollout
		if err := json.Unmarshal(kv.Value, &ar); err != nil {
			return nil, fmt.Errorf("store: rollouts: decode %s: %w", kv.Key, err)
		}
		out = append(out, ar)
	}
	return out, nil
}

// SetShadow implements store.Store: one transaction, compare-and-swap on the active set, which
// holds the shadow pointers beside the active ones.
func (s *Etcd) SetShadow(ctx context.Context, name string, version int) (int, error) {
	if err := precheck(ctx, store.KindProtocol); err != nil {
		return 0, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	kind := store.KindProtocol
	if err := checkName(kind, name); err != nil {
		return 0, fmt.Errorf("store: shadow: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("store: %w", err)
		}
		set, setRev, exists, has, err := s.readSet(ctx, kind, name, version)
		if err != nil {
			return 0, fmt.Errorf("store: shadow: %s/%s: %w", kind, name, err)
		}
		if !exists {
			return 0, fmt.Errorf("store: shadow: %s/%s: %w", kind, name, store.ErrNotFound)
		}
		p := set.get(kind, name)
		prev := p.Shadow
		if err := store.CheckShadow(kind, name, version, prev, p.Active, has); err != nil {
			return 0, fmt.Errorf("store: shadow: %w", err)
		}
		if prev == version {
			return prev, nil
		}
		p.Shadow = version
		p.History = append([]int(nil), p.History...)
		set.set(kind, name, p)
		rev, ok, err := s.putSet(ctx, set, setRev)
		if err != nil {
			return 0, fmt.Errorf("store: shadow: %s/%s: %w", kind, name, err)
		}
		if !ok {
			continue
		}
		s.log.Info("store: shadow set", "kind", kind, "name", name, "version", version, "previous", prev)
		s.committed(rev)
		return prev, nil
	}
}

// SetToolEnabled implements store.Store.
func (s *Etcd) SetToolEnabled(ctx context.Context, name string, enabled bool, author string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if name == "" || len(name) > 256 {
		return fmt.Errorf("store: tool name %q: %w: 1 to 256 bytes", name, store.ErrInvalid)
	}
	v, err := json.Marshal(store.ToolOverride{Enabled: enabled, Author: author, UpdatedAt: time.Now().UTC()})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	r, err := s.client().Put(ctx, s.kTool(name), string(v))
	if err != nil {
		return fmt.Errorf("store: tool %q: %w", name, err)
	}
	s.log.Info("store: tool enablement set", "tool", name, "enabled", enabled, "author", author)
	s.committed(r.Header.Revision)
	return nil
}

// ClearToolEnabled implements store.Store.
func (s *Etcd) ClearToolEnabled(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	r, err := s.client().Delete(ctx, s.kTool(name))
	if err != nil {
		return fmt.Errorf("store: tool %q: %w", name, err)
	}
	if r.Deleted == 0 {
		return fmt.Errorf("store: tool override %q: %w", name, store.ErrNotFound)
	}
	s.log.Info("store: tool enablement cleared", "tool", name)
	s.committed(r.Header.Revision)
	return nil
}

// bound gives ctx the store's DialTimeout when it has no deadline, so that no call waits forever
// for an unreachable etcd (the client retries until its context ends).
func (s *Etcd) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.boundFor(ctx, s.timeout)
}

func (s *Etcd) boundFor(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// checkLinks runs the Links hook on set, the active set a change would write: it reads the bodies
// of the active versions (immutable, so the latest revision serves), with the bodies of proposed
// ("KIND/NAME" → body) in their place; changed and the keys of proposed are what the change
// touches.
func (s *Etcd) checkLinks(ctx context.Context, set activeSet, proposed map[string][]byte, changed ...string) error {
	if s.links == nil {
		return nil
	}
	var want []store.Record
	for _, kind := range store.Kinds() {
		for _, name := range set.sortedNames(kind) {
			if v := set.get(kind, name).Active; v > 0 && proposed[store.Key(kind, name)] == nil {
				want = append(want, store.Record{Kind: kind, Name: name, Version: v})
			}
		}
	}
	recs, err := s.readRecords(ctx, want, 0)
	if err != nil {
		return err
	}
	snap := store.NewSnapshot()
	snap.Tools = nil
	for _, rec := range recs {
		snap.Of(rec.Kind)[rec.Name] = rec
	}
	return s.links.Check(snap, proposed, changed)
}
