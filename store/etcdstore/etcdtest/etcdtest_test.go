package etcdtest

import (
	"context"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// While etcd is down, other sockets take its internal ports; Restart still brings it back on the
// advertised port with its data, and the advertised port refuses work while etcd is down.
func TestRestartAfterPortsAreTaken(t *testing.T) {
	s := Start(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(ctx context.Context) error { _, err := cli.Put(ctx, "k", "v"); return err }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := put(ctx); err != nil {
		t.Fatal(err)
	}

	s.Stop()
	for _, hp := range []string{s.clientURL.Host, s.peerURL.Host} {
		ln, err := net.Listen("tcp", hp)
		if err != nil {
			t.Fatalf("take %s: %v", hp, err)
		}
		defer ln.Close()
	}
	short, cancelShort := context.WithTimeout(context.Background(), time.Second)
	defer cancelShort()
	if _, err := cli.Get(short, "k"); err == nil {
		t.Fatal("a read succeeded while etcd was stopped")
	}

	s.Restart()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	got, err := cli.Get(ctx2, "k")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v" {
		t.Fatalf("after restart: %v", got.Kvs)
	}
}
