package etcdstore

import (
	"context"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// topLevel lists what layout 1 and 2 keep directly under a prefix: keys, and folders (ending in
// "/").
var topLevel = []string{keySchema, keyCreatedAt, dirSeq, dirVersions, dirInfo, keyActiveSet, keyRolloutSeq,
	dirRollouts, dirRolloutIDs, dirTools, keyCopying, dirActive, dirHistory}

// checkNesting refuses a prefix that lies inside another fleet's prefix, or that holds another
// fleet's: the two would read each other's keys (the outer one's watch fires on the inner one's
// changes, its copy and export take the inner one's keys for its own).
//
// Inside another: an ancestor prefix (for /a/b/c/: /a/ and /a/b/) holds a schema key. An ancestor
// the etcd user may not read is skipped (no fleet this user can reach lives there). Holding
// another: a key under the prefix whose first segment is none of this layout's (/a/team/schema
// under /a/). A fleet nested under one of this layout's own folder names (/a/tools/) is caught from
// its side: it lies inside /a/.
func (s *Etcd) checkNesting(ctx context.Context) error {
	for i := 1; i < len(s.p)-1; i++ {
		if s.p[i] != '/' {
			continue
		}
		anc := s.p[:i+1]
		r, err := s.client().Get(ctx, anc+keySchema, clientv3.WithCountOnly())
		if err != nil {
			if refused(err) {
				continue
			}
			return err
		}
		if r.Count > 0 {
			return fmt.Errorf("prefix %s lies inside %s, the prefix of another fleet (it holds %s%s): prefixes of two fleets must not nest; choose one beside it, e.g. %s", s.p, anc, anc, keySchema, strings.TrimSuffix(anc, "/")+"-"+strings.ReplaceAll(strings.Trim(strings.TrimPrefix(s.p, anc), "/"), "/", "-")+"/")
		}
	}
	// The gaps between this layout's top-level names, as key ranges.
	type span struct{ from, to string }
	var own []span
	for _, k := range topLevel {
		if strings.HasSuffix(k, "/") {
			own = append(own, span{s.p + k, clientv3.GetPrefixRangeEnd(s.p + k)})
		} else {
			own = append(own, span{s.p + k, s.p + k + "\x00"})
		}
	}
	sort.Slice(own, func(i, j int) bool { return own[i].from < own[j].from })
	var gaps []span
	at := s.p
	for _, o := range own {
		if at < o.from {
			gaps = append(gaps, span{at, o.from})
		}
		at = max(at, o.to)
	}
	if end := clientv3.GetPrefixRangeEnd(s.p); at < end {
		gaps = append(gaps, span{at, end})
	}
	ops := make([]clientv3.Op, 0, len(gaps))
	for _, g := range gaps {
		ops = append(ops, clientv3.OpGet(g.from, clientv3.WithRange(g.to), clientv3.WithKeysOnly(), clientv3.WithLimit(1)))
	}
	tr, err := s.client().Txn(ctx).Then(ops...).Commit()
	if err != nil {
		if refused(err) {
			return nil // reported by the caller's own read of the prefix
		}
		return err
	}
	for _, resp := range tr.Responses {
		if kvs := resp.GetResponseRange().Kvs; len(kvs) > 0 {
			return fmt.Errorf("prefix %s holds %s, which is not a promptgate key: another fleet's prefix nested inside it, or another program's keys? prefixes of two fleets must not nest; choose a prefix of its own", s.p, kvs[0].Key)
		}
	}
	return nil
}
