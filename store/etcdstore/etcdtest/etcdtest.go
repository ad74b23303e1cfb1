// Package etcdtest starts a real single-member etcd (go.etcd.io/etcd/server/v3/embed) for tests, on
// 127.0.0.1 with free ports and a test-owned data folder, and can stop and restart it on the same
// ports and data.
//
// Clients reach etcd through a small TCP forwarder on the advertised port: Stop cuts every client
// connection first, so that etcd's graceful shutdown does not wait its request timeout (7 s) for open
// watch streams, then stops etcd; Restart starts etcd on the same data and ports and reopens the door.
package etcdtest

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Server is one embedded etcd member.
type Server struct {
	t                          testing.TB
	dir                        string
	public, clientURL, peerURL url.URL

	mu    sync.Mutex
	e     *embed.Etcd
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// Start starts etcd and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), conns: map[net.Conn]bool{}}
	s.public = url.URL{Scheme: "http", Host: freeAddr(t)}
	s.clientURL = url.URL{Scheme: "http", Host: freeAddr(t)}
	s.peerURL = url.URL{Scheme: "http", Host: freeAddr(t)}
	s.Restart()
	t.Cleanup(s.Stop)
	return s
}

// Endpoint is the client URL, "http://127.0.0.1:PORT".
func (s *Server) Endpoint() string { return s.public.String() }

// HostPort is the client address, "127.0.0.1:PORT".
func (s *Server) HostPort() string { return s.public.Host }

// Stop cuts every client connection and stops etcd (idempotent).
func (s *Server) Stop() {
	s.mu.Lock()
	if s.ln != nil {
		_ = s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		_ = c.Close()
	}
	e := s.e
	s.e = nil
	s.mu.Unlock()
	s.wg.Wait()
	if e != nil {
		e.Close()
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
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.public}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = fmt.Sprintf("default=%s", s.peerURL.String())
	var (
		e   *embed.Etcd
		err error
	)
	// After Stop, the kernel may take a moment to release the ports.
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
	for range 50 {
		if s.ln, err = net.Listen("tcp", s.public.Host); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("etcdtest: listen %s: %v", s.public.Host, err)
	}
	s.wg.Add(1)
	go s.accept(s.ln)
}

// accept forwards every connection of ln to etcd's client port.
func (s *Server) accept(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", s.clientURL.Host)
		if err != nil {
			_ = c.Close()
			continue
		}
		s.mu.Lock()
		if s.ln != ln {
			s.mu.Unlock()
			_ = c.Close()
			_ = up.Close()
			return
		}
		s.conns[c], s.conns[up] = true, true
		s.mu.Unlock()
		s.wg.Add(2)
		pipe := func(dst, src net.Conn) {
			defer s.wg.Done()
			_, _ = io.Copy(dst, src) // ends when either side closes
			_ = dst.Close()
			_ = src.Close()
			s.mu.Lock()
			delete(s.conns, dst)
			delete(s.conns, src)
			s.mu.Unlock()
		}
		go pipe(up, c)
		go pipe(c, up)
	}
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
