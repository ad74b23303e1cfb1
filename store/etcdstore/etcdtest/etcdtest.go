// Package etcdtest starts a real single-member etcd (go.etcd.io/etcd/server/v3/embed) for tests, on
// 127.0.0.1 with free ports and a test-owned data folder, and can stop and restart it on the same
// ports and data.
package etcdtest

import (
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// Server is one embedded etcd member.
type Server struct {
	t                  testing.TB
	dir                string
	clientURL, peerURL url.URL

	mu sync.Mutex
	e  *embed.Etcd
}

// Start starts etcd and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir()}
	s.clientURL = url.URL{Scheme: "http", Host: freeAddr(t)}
	s.peerURL = url.URL{Scheme: "http", Host: freeAddr(t)}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Endpoint is the client URL, "http://127.0.0.1:PORT".
func (s *Server) Endpoint() string { return s.clientURL.String() }

// HostPort is the client address, "127.0.0.1:PORT".
func (s *Server) HostPort() string { return s.clientURL.Host }

// Stop stops etcd (idempotent).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		s.e.Close()
		s.e = nil
	}
}

// Restart starts etcd again on the same ports and data folder (or for the first time).
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		return
	}
	cfg := embed.NewConfig()
	cfg.Name = "default"
	cfg.Dir = s.dir
	cfg.LogLevel = "error"
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = fmt.Sprintf("default=%s", s.peerURL.String())
	var (
		e   *embed.Etcd
		err error
	)
	// The ports were free a moment ago; after Stop, the kernel may take a moment to release them.
	for range 50 {
		if e, err = embed.StartEtcd(cfg); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("etcdtest: start etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		s.t.Fatal("etcdtest: etcd did not become ready")
	}
	s.e = e
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
