package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/promptgate/promptgate/store"
)

// pointer is the active version and the activation history of one name.
type pointer struct {
	Active  int   `json:"active,omitempty"`
	History []int `json:"history,omitempty"`
	// Shadow is the protocol version in shadow (0 = none).
	Shadow int `json:"shadow,omitempty"`
}

// activeSet is the value of the key P activeset: every name's active pointer and history, by kind
// then name. Every activation, rollback, rollout and revert rewrites it in one compare-and-swap, so
// a change of any number of names is one etcd transaction of a few operations, and a watcher sees
// all of it or none.
type activeSet map[store.Kind]map[string]pointer

func (a activeSet) get(kind store.Kind, name string) pointer { return a[kind][name] }

func (a activeSet) set(kind store.Kind, name string, p pointer) {
	if a[kind] == nil {
		a[kind] = map[string]pointer{}
	}
	if len(p.History) > store.MaxHistory {
		p.History = p.History[len(p.History)-store.MaxHistory:]
	}
	if p.Shadow == p.Active {
		p.Shadow = 0 // activating the version in shadow takes it out of shadow
	}
	if p.Active == 0 && len(p.History) == 0 && p.Shadow == 0 {
		delete(a[kind], name)
		return
	}
	a[kind][name] = p
}

// move makes v (0 = none) the active version of name, pushing the current one on its history, and
// returns the version it replaced.
func (a activeSet) move(kind store.Kind, name string, v int) int {
	p := a.get(kind, name)
	prev := p.Active
	if prev == v {
		return prev
	}
	hist := append([]int(nil), p.History...)
	if prev != 0 {
		hist = append(hist, prev)
	}
	a.set(kind, name, pointer{Active: v, History: hist, Shadow: p.Shadow})
	return prev
}

// clone copies a so that a failed compare-and-swap leaves nothing behind.
func (a activeSet) clone() activeSet {
	out := activeSet{}
	for k, m := range a {
		for n, p := range m {
			out.set(k, n, pointer{Active: p.Active, History: append([]int(nil), p.History...), Shadow: p.Shadow})
		}
	}
	return out
}

// maxSetBytes bounds the encoded active set, well under etcd's default --max-request-bytes (1.5
// MiB). When the histories would make it larger, every history is cut to its newest entries, to a
// common length halved until the set fits (as store.MaxHistory cuts them per name): Rollback
// reaches less far back, activations never fail for it.
const maxSetBytes = 1 << 20

// encode returns the JSON of a, cutting histories to fit maxSetBytes (a itself is cut too).
func (a activeSet) encode() ([]byte, error) {
	for limit := store.MaxHistory; ; limit /= 2 {
		for k, m := range a {
			for n, p := range m {
				if len(p.History) > limit {
					p.History = p.History[len(p.History)-limit:]
					a.set(k, n, p)
				}
			}
		}
		b, err := json.Marshal(a)
		if err != nil {
			return nil, err
		}
		if len(b) <= maxSetBytes {
			return b, nil
		}
		if limit == 0 {
			return nil, fmt.Errorf("the active set of %d names is %d bytes, over the limit of %d even without history", a.count(), len(b), maxSetBytes)
		}
	}
}

func (a activeSet) count() int {
	n := 0
	for _, m := range a {
		n += len(m)
	}
	return n
}

// decodeSet reads the value of the activeset key; an absent key is an empty set.
func decodeSet(kvs []*mvccKV) (activeSet, int64, error) {
	a := activeSet{}
	if len(kvs) == 0 {
		return a, 0, nil
	}
	if err := json.Unmarshal(kvs[0].Value, &a); err != nil {
		return nil, 0, fmt.Errorf("key %s: decode the active set: %w", kvs[0].Key, err)
	}
	for k, m := range a {
		if !k.Valid() {
			return nil, 0, fmt.Errorf("key %s: unknown kind %q in the active set", kvs[0].Key, k)
		}
		for n, p := range m {
			if !store.ValidName(n) || p.Active < 0 || p.Shadow < 0 {
				return nil, 0, fmt.Errorf("key %s: bad entry %s/%q in the active set", kvs[0].Key, k, n)
			}
		}
	}
	return a, kvs[0].ModRevision, nil
}

// setGuard is the compare-and-swap on the active set as read at modRev (0: the key was absent).
func (s *Etcd) setGuard(modRev int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(s.p+keyActiveSet), "=", modRev)
}

// putSet writes a where the active set is still at modRev. ok false means another writer came
// first: read the set again and retry. rev is the revision of the write.
func (s *Etcd) putSet(ctx context.Context, a activeSet, modRev int64) (rev int64, ok bool, err error) {
	put, err := s.setOp(a)
	if err != nil {
		return 0, false, err
	}
	tr, err := s.client().Txn(ctx).If(s.setGuard(modRev)).Then(put).Commit()
	if err != nil {
		return 0, false, err
	}
	return tr.Header.Revision, tr.Succeeded, nil
}

// setOp writes a.
func (s *Etcd) setOp(a activeSet) (clientv3.Op, error) {
	b, err := a.encode()
	if err != nil {
		return clientv3.Op{}, err
	}
	return clientv3.OpPut(s.p+keyActiveSet, string(b)), nil
}

// legacySet reads the per-name pointers of layout 1 (P active/KIND/NAME, P history/KIND/NAME) from
// kvs, the keys of those two folders.
func (s *Etcd) legacySet(kvs []*mvccKV) (activeSet, error) {
	a := activeSet{}
	for _, kv := range kvs {
		rest := strings.TrimPrefix(string(kv.Key), s.p)
		dir, rest, _ := strings.Cut(rest, "/")
		kindName, name, ok := strings.Cut(rest, "/")
		kind := store.Kind(kindName)
		if !ok || !kind.Valid() || !store.ValidName(name) {
			return nil, fmt.Errorf("key %s: not a promptgate key of layout 1", kv.Key)
		}
		p := a.get(kind, name)
		switch dir + "/" {
		case dirActive:
			v, _, err := intOf([]*mvccKV{kv})
			if err != nil {
				return nil, err
			}
			p.Active = v
		case dirHistory:
			h, _, err := historyOf([]*mvccKV{kv})
			if err != nil {
				return nil, err
			}
			p.History = h
		default:
			return nil, fmt.Errorf("key %s: not a promptgate key of layout 1", kv.Key)
		}
		a.set(kind, name, p)
	}
	return a, nil
}

// migrate moves a prefix of layout 1 to layout 2 in one transaction: it writes the active set built
// from the per-name keys and the schema "2". The layout-1 keys are left as they were, so that an
// instance of an older release still running on the prefix keeps serving what was active at the
// migration (it no longer sees changes; restart it with this release); delete them with etcdctl
// once none is left.
func (s *Etcd) migrate(ctx context.Context, schemaRev int64) error {
	tr, err := s.client().Txn(ctx).Then(
		clientv3.OpGet(s.p+dirActive, clientv3.WithPrefix()),
		clientv3.OpGet(s.p+dirHistory, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return err
	}
	kvs := append(tr.Responses[0].GetResponseRange().Kvs, tr.Responses[1].GetResponseRange().Kvs...)
	a, err := s.legacySet(kvs)
	if err != nil {
		return fmt.Errorf("migrate layout 1 to 2: %w", err)
	}
	put, err := s.setOp(a)
	if err != nil {
		return fmt.Errorf("migrate layout 1 to 2: %w", err)
	}
	// The pointers read must not have moved meanwhile (an instance of the older release writing).
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(s.p+keySchema), "=", schemaRev),
		clientv3.Compare(clientv3.CreateRevision(s.p+keyActiveSet), "=", 0),
		clientv3.Compare(clientv3.ModRevision(s.p+dirActive), "<", tr.Header.Revision+1).WithPrefix(),
		clientv3.Compare(clientv3.ModRevision(s.p+dirHistory), "<", tr.Header.Revision+1).WithPrefix(),
	}
	r, err := s.client().Txn(ctx).If(cmps...).Then(put, clientv3.OpPut(s.p+keySchema, fmt.Sprint(schemaVersion))).Commit()
	if err != nil {
		return fmt.Errorf("migrate layout 1 to 2: %w", err)
	}
	if r.Succeeded {
		s.log.Info("store: etcd prefix migrated from layout 1 (a key per active pointer) to layout 2 (one active set)", "prefix", s.p, "names", a.count())
		s.committed(r.Header.Revision)
	}
	return nil // else another instance migrated it (or changed it: init reads the schema again)
}

// sortedNames returns the names of kind in a, sorted.
func (a activeSet) sortedNames(kind store.Kind) []string {
	out := make([]string, 0, len(a[kind]))
	for n := range a[kind] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
