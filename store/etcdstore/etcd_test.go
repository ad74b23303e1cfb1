package etcdstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/etcdstore"
	"github.com/promptgate/promptgate/store/etcdstore/etcdtest"
	"github.com/promptgate/promptgate/store/storetest"
)

func TestEtcdConformance(t *testing.T) {
	srv := etcdtest.Start(t)
	var n atomic.Int32
	storetest.Run(t, func(t *testing.T, validate func(store.Kind, string, []byte) error) store.Store {
		s, err := etcdstore.Open(context.Background(), etcdstore.Options{
			Endpoints: []string{srv.Endpoint()},
			Prefix:    fmt.Sprintf("/conformance/%d", n.Add(1)),
			Validate:  validate,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}
