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
	tr, err := s.client().Txn(ctx).Then(clientv3.OpGet(s.kActive(kind, name)), clientv3.OpGet(s.kSeq(kind, name), clientv3.WithCountOnly())).Commit()
	if err != nil {
		return store.Record{}, fmt.Errorf("store: %s/%s: %w", kind, name, err)
	}
	if tr.Responses[1].GetResponseRange().Count == 0 {
		return store.Record{}, fmt.Errorf("store: %s/%s: %w", kind, name, store.ErrNotFound)
	}
	v, _, err := intOf(tr.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return store.Record{}, fmt.Errorf("store: %w", err)
	}
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
		clientv3.OpGet(s.p+dirActive+string(kind)+"/", clientv3.WithPrefix()),
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
	actDir := s.p + dirActive + string(kind) + "/"
	for _, kv := range tr.Responses[1].GetResponseRange().Kvs {
		if e := byName[strings.TrimPrefix(string(kv.Key), actDir)]; e != nil {
			v, _, err := intOf([]*mvccKV{kv})
			if err != nil {
				return nil, fmt.Errorf("store: list %s: %w", kind, err)
			}
			e.Active = v
		}
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
		clientv3.OpGet(s.kActive(kind, name)),
		clientv3.OpGet(s.p+dirInfo+string(kind)+"/"+name+"/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return store.Entry{}, fmt.Errorf("store: %s/%s: %w", kind, name, err)
	}
	if tr.Responses[0].GetResponseRange().Count == 0 {
		return store.Entry{}, fmt.Errorf("store: %s/%s: %w", kind, name, store.ErrNotFound)
	}
	e := store.Entry{Name: name, Versions: []store.VersionInfo{}}
	if e.Active, _, err = intOf(tr.Responses[1].GetResponseRange().Kvs); err != nil {
		return store.Entry{}, fmt.Errorf("store: %w", err)
	}
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

// pointer is the active pointer and history of one name, as read, with the revisions to compare.
type pointer struct {
	active  int
	aRev    int64
	hist    []int
	histRev int64
	exists  bool // the name has versions
}

// readPointer reads the active pointer and history of a name, and whether version want exists (want 0: skip).
func (s *Etcd) readPointer(ctx context.Context, kind store.Kind, name string, want int) (pointer, bool, error) {
	ops := []clientv3.Op{
		clientv3.OpGet(s.kActive(kind, name)),
		clientv3.OpGet(s.kHistory(kind, name)),
		clientv3.OpGet(s.kSeq(kind, name), clientv3.WithCountOnly()),
	}
	if want > 0 {
		ops = append(ops, clientv3.OpGet(s.kBody(kind, name, want), clientv3.WithCountOnly()))
	}
	tr, err := s.client().Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return pointer{}, false, err
	}
	var p pointer
	if p.active, p.aRev, err = intOf(tr.Responses[0].GetResponseRange().Kvs); err != nil {
		return pointer{}, false, err
	}
	if p.hist, p.histRev, err = historyOf(tr.Responses[1].GetResponseRange().Kvs); err != nil {
		return pointer{}, false, err
	}
	p.exists = tr.Responses[2].GetResponseRange().Count > 0
	has := want > 0 && tr.Responses[3].GetResponseRange().Count > 0
	return p, has, nil
}

// guard is the compare-and-swap on a name's active pointer and history.
func (s *Etcd) guard(kind store.Kind, name string, p pointer) []clientv3.Cmp {
	return []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(s.kActive(kind, name)), "=", p.aRev),
		clientv3.Compare(clientv3.ModRevision(s.kHistory(kind, name)), "=", p.histRev),
	}
}

// Activate implements store.Store: one transaction, compare-and-swap on the active pointer and its
// history; when another activation won the race, this one is applied on top of it (both stay in history).
func (s *Etcd) Activate(ctx context.Context, kind store.Kind, name string, version int) error {
	if err := precheck(ctx, kind); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkName(kind, name); err != nil {
		return fmt.Errorf("store: activate: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		p, has, err := s.readPointer(ctx, kind, name, version)
		if err != nil {
			return fmt.Errorf("store: activate: %s/%s: %w", kind, name, err)
		}
		if !p.exists {
			return fmt.Errorf("store: activate: %s/%s: %w", kind, name, store.ErrNotFound)
		}
		if !has {
			return fmt.Errorf("store: activate: %s/%s@%d: %w", kind, name, version, store.ErrNotFound)
		}
		if p.active == version {
			return nil
		}
		hist := p.hist
		if p.active != 0 {
			hist = append(hist, p.active)
		}
		tr, err := s.client().Txn(ctx).If(s.guard(kind, name, p)...).
			Then(activeOp(s.kActive(kind, name), version), historyOp(s.kHistory(kind, name), hist)).Commit()
		if err != nil {
			return fmt.Errorf("store: activate: %s/%s: %w", kind, name, err)
		}
		if !tr.Succeeded {
			continue
		}
		s.log.Info("store: version activated", "kind", kind, "name", name, "version", version, "previous", p.active)
		s.committed(tr.Header.Revision)
		return nil
	}
}

// Rollback implements store.Store.
func (s *Etcd) Rollback(ctx context.Context, kind store.Kind, name string) (int, error) {
	if err := precheck(ctx, kind); err != nil {
		return 0, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkName(kind, name); err != nil {
		return 0, fmt.Errorf("store: rollback: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("store: %w", err)
		}
		p, _, err := s.readPointer(ctx, kind, name, 0)
		if err != nil {
			return 0, fmt.Errorf("store: rollback: %s/%s: %w", kind, name, err)
		}
		if !p.exists {
			return 0, fmt.Errorf("store: rollback: %s/%s: %w", kind, name, store.ErrNotFound)
		}
		hist := p.hist
		for len(hist) > 0 && hist[len(hist)-1] == p.active {
			hist = hist[:len(hist)-1]
		}
		if len(hist) == 0 {
			return 0, fmt.Errorf("store: rollback: %s/%s: from version %d: %w", kind, name, p.active, store.ErrNoPreviousVersion)
		}
		to := hist[len(hist)-1]
		tr, err := s.client().Txn(ctx).If(s.guard(kind, name, p)...).
			Then(activeOp(s.kActive(kind, name), to), historyOp(s.kHistory(kind, name), hist[:len(hist)-1])).Commit()
		if err != nil {
			return 0, fmt.Errorf("store: rollback: %s/%s: %w", kind, name, err)
		}
		if !tr.Succeeded {
			continue
		}
		s.log.Info("store: rolled back", "kind", kind, "name", name, "version", to, "from", p.active)
		s.committed(tr.Header.Revision)
		return to, nil
	}
}

// Snapshot implements store.Store: every active record at one etcd revision. While etcd is unreachable
// it fails (callers keep what they have), except before the first read from etcd, when the snapshot file
// Open loaded is returned.
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
	snap := store.Snapshot{Templates: map[string]store.Record{}, Protocols: map[string]store.Record{}, Tools: map[string]store.ToolOverride{}}
	tr, err := s.client().Txn(ctx).Then(
		clientv3.OpGet(s.p+dirActive, clientv3.WithPrefix()),
		clientv3.OpGet(s.p+dirTools, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return snap, 0, err
	}
	rev := tr.Header.Revision
	for _, kv := range tr.Responses[1].GetResponseRange().Kvs {
		var o store.ToolOverride
		name := strings.TrimPrefix(string(kv.Key), s.p+dirTools)
		if err := json.Unmarshal(kv.Value, &o); err != nil {
			return snap, 0, fmt.Errorf("tool override %q: %w", name, err)
		}
		snap.Tools[name] = o
	}
	for _, kv := range tr.Responses[0].GetResponseRange().Kvs {
		kindName, name, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), s.p+dirActive), "/")
		kind := store.Kind(kindName)
		if !ok || !kind.Valid() {
			continue
		}
		v, _, err := intOf([]*mvccKV{kv})
		if err != nil {
			return snap, 0, err
		}
		rec, err := s.readRecord(ctx, kind, name, v, rev)
		if err != nil {
			return snap, 0, err
		}
		snap.Of(kind)[name] = rec
	}
	return snap, rev, nil
}

type rolloutItem struct {
	kind store.Kind
	name string
	body []byte
}

// checkRollout runs every check on r (structure and the Validate hook) and returns its definitions in
// the order they are applied (templates, then protocols).
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

// maxRolloutItems keeps a rollout's transaction under etcd's default --max-txn-ops (128): each
// definition writes 5 keys.
const maxRolloutItems = 25

// ApplyRollout implements store.Store: one transaction, guarded by compare-and-swap on every key it read.
func (s *Etcd) ApplyRollout(ctx context.Context, r store.Rollout) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	items, err := s.checkRollout(r)
	if err != nil {
		return fmt.Errorf("store: rollout %q: %w", r.ID, err)
	}
	if len(items) > maxRolloutItems {
		return fmt.Errorf("store: rollout %q: %w: %d definitions; on etcd one rollout holds at most %d (one transaction): split it", r.ID, store.ErrInvalid, len(items), maxRolloutItems)
	}
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		now := time.Now().UTC()
		applied := store.AppliedRollout{ID: r.ID, AppliedAt: now, Previous: map[string]int{}, Activated: map[string]int{}}
		head, err := s.client().Txn(ctx).Then(
			clientv3.OpGet(s.kRolloutID(r.ID), clientv3.WithCountOnly()),
			clientv3.OpGet(s.p+keyRolloutSeq)).Commit()
		if err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
		if head.Responses[0].GetResponseRange().Count > 0 {
			return fmt.Errorf("store: rollout %q: %w", r.ID, store.ErrAlreadyApplied)
		}
		seq, seqRev, err := intOf(head.Responses[1].GetResponseRange().Kvs)
		if err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(s.kRolloutID(r.ID)), "=", 0),
			clientv3.Compare(clientv3.ModRevision(s.p+keyRolloutSeq), "=", seqRev),
		}
		var ops []clientv3.Op
		for _, it := range items {
			rs, err := s.client().Get(ctx, s.kSeq(it.kind, it.name))
			if err != nil {
				return fmt.Errorf("store: rollout %q: %w", r.ID, err)
			}
			last, lastRev, err := intOf(rs.Kvs)
			if err != nil {
				return fmt.Errorf("store: rollout %q: %w", r.ID, err)
			}
			p, _, err := s.readPointer(ctx, it.kind, it.name, 0)
			if err != nil {
				return fmt.Errorf("store: rollout %q: %w", r.ID, err)
			}
			v := last + 1
			info, err := json.Marshal(store.VersionInfo{Version: v, CreatedAt: now, Author: store.RolloutAuthor, Note: r.ID})
			if err != nil {
				return fmt.Errorf("store: %w", err)
			}
			hist := p.hist
			if p.active != 0 && p.active != v {
				hist = append(hist, p.active)
			}
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.kSeq(it.kind, it.name)), "=", lastRev))
			cmps = append(cmps, s.guard(it.kind, it.name, p)...)
			ops = append(ops,
				clientv3.OpPut(s.kSeq(it.kind, it.name), strconv.Itoa(v)),
				clientv3.OpPut(s.kBody(it.kind, it.name, v), string(it.body)),
				clientv3.OpPut(s.kInfo(it.kind, it.name, v), string(info)),
				activeOp(s.kActive(it.kind, it.name), v),
				historyOp(s.kHistory(it.kind, it.name), hist))
			applied.Previous[store.Key(it.kind, it.name)] = p.active
			applied.Activated[store.Key(it.kind, it.name)] = v
		}
		rec, err := json.Marshal(applied)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		seq++
		ops = append(ops,
			clientv3.OpPut(s.p+keyRolloutSeq, strconv.Itoa(seq)),
			clientv3.OpPut(s.kRollout(uint64(seq)), string(rec)),
			clientv3.OpPut(s.kRolloutID(r.ID), strconv.Itoa(seq)))
		tr, err := s.client().Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("store: rollout %q: %w", r.ID, err)
		}
		if !tr.Succeeded {
			continue
		}
		s.log.Info("store: rollout applied", "id", r.ID, "activated", applied.Activated)
		s.committed(tr.Header.Revision)
		return nil
	}
}

// RevertLast implements store.Store.
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
		last, err := s.client().Get(ctx, s.p+dirRollouts, append(clientv3.WithLastKey(), clientv3.WithPrefix())...)
		if err != nil {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %w", err)
		}
		if len(last.Kvs) == 0 {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %w", store.ErrNothingToRevert)
		}
		kv := last.Kvs[0]
		var ar store.AppliedRollout
		if err := json.Unmarshal(kv.Value, &ar); err != nil {
			return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: decode %s: %w", kv.Key, err)
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)}
		var ops []clientv3.Op
		var moved []string
		keys := make([]string, 0, len(ar.Previous))
		for key := range ar.Previous {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			kindName, name, ok := strings.Cut(key, "/")
			kind := store.Kind(kindName)
			if !ok || !kind.Valid() || !store.ValidName(name) {
				return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: applied rollout %q: bad key %q", ar.ID, key)
			}
			prev, activated := ar.Previous[key], ar.Activated[key]
			p, has, err := s.readPointer(ctx, kind, name, prev)
			if err != nil {
				return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %w", err)
			}
			if !p.exists {
				return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %s/%s: %w", kind, name, store.ErrNotFound)
			}
			if prev != 0 && !has {
				return store.AppliedRollout{}, fmt.Errorf("store: revert last rollout: %s: version %d to re-activate: %w", key, prev, store.ErrNotFound)
			}
			cmps = append(cmps, s.guard(kind, name, p)...)
			hist := p.hist
			if p.active == activated && (prev == 0 || (len(hist) > 0 && hist[len(hist)-1] == prev)) {
				if prev != 0 {
					hist = hist[:len(hist)-1]
				}
				ops = append(ops, historyOp(s.kHistory(kind, name), hist), activeOp(s.kActive(kind, name), prev))
				continue
			}
			moved = append(moved, key)
			if p.active != prev {
				if p.active != 0 {
					hist = append(hist, p.active)
				}
				ops = append(ops, historyOp(s.kHistory(kind, name), hist), activeOp(s.kActive(kind, name), prev))
			}
		}
		ops = append(ops, clientv3.OpDelete(string(kv.Key)), clientv3.OpDelete(s.kRolloutID(ar.ID)))
		tr, err := s.client().Txn(ctx).If(cmps...).Then(ops...).Commit()
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

// bound gives ctx the store's DialTimeout when it has no deadline, so that no call waits forever for an
// unreachable etcd (the client retries until its context ends).
func (s *Etcd) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.boundFor(ctx, s.timeout)
}

func (s *Etcd) boundFor(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
