package etcdstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/store"
)

func TestActiveSetTrimsHistoryToFit(t *testing.T) {
	a := activeSet{}
	const names = 2000
	for i := range names {
		hist := make([]int, store.MaxHistory)
		for j := range hist {
			hist[j] = 100000 + j
		}
		a.set(store.KindTemplate, fmt.Sprintf("name_%04d", i), pointer{Active: 99999, History: hist})
	}
	if b, _ := json.Marshal(a); len(b) <= maxSetBytes {
		t.Fatalf("test set is only %d bytes", len(b))
	}
	b, err := a.encode()
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxSetBytes {
		t.Fatalf("encoded %d bytes, over %d", len(b), maxSetBytes)
	}
	var back activeSet
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for i := range names {
		p := back.get(store.KindTemplate, fmt.Sprintf("name_%04d", i))
		if p.Active != 99999 || len(p.History) == 0 || p.History[len(p.History)-1] != 100000+store.MaxHistory-1 {
			t.Fatalf("name_%04d: active %d, history ends %v: the pointer and the newest history must stay", i, p.Active, p.History[max(0, len(p.History)-3):])
		}
	}
}

func TestActiveSetOverTheLimitWithoutHistoryIsAnError(t *testing.T) {
	a := activeSet{}
	long := strings.Repeat("x", 200)
	for i := range 8000 {
		a.set(store.KindProtocol, fmt.Sprintf("%s_%05d", long, i), pointer{Active: 1})
	}
	if _, err := a.encode(); err == nil || !strings.Contains(err.Error(), "8000 names") || !strings.Contains(err.Error(), fmt.Sprint(maxSetBytes)) {
		t.Fatalf("want an error naming the count and the limit: %v", err)
	}
}

func TestDecodeSetRefusesBadEntries(t *testing.T) {
	for _, bad := range []string{`[]`, `{"widgets":{}}`, `{"templates":{"a b":{"active":1}}}`, `{"templates":{"a":{"active":-1}}}`, `{"templates":{"a":{"history":"x"}}}`} {
		if _, _, err := decodeSet([]*mvccKV{{Key: []byte("/p/activeset"), Value: []byte(bad)}}); err == nil || !strings.Contains(err.Error(), "/p/activeset") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
