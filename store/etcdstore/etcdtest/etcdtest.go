// Package etcdtest starts a real single-member etcd (go.etcd.io/etcd/server/v3/embed) for tests, on
// 127.0.0.1 with free ports and a test-owned data folder, and can stop and restart it on the same
// ports and data.
//
// With StartWith it serves clients over TLS (optionally requiring client certificates) with
// certificates made in the test, and/or with authentication enabled and users set up.
//
// Clients reach etcd through a small TCP forwarder on the advertised port, which stays bound for
// the whole test so that no other socket can take it while etcd is down: Stop cuts every client
// connection first, so that etcd's graceful shutdown does not wait its request timeout (7 s) for
// open watch streams, then stops etcd, and the forwarder closes every new connection at once;
// Restart starts etcd on the same data (on new internal ports if another socket took the old ones
// meanwhile) and reopens the door.
package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Options of StartWith.
type Options struct {
	// TLS serves clients over TLS with a server certificate for 127.0.0.1 signed by a CA made for
	// the test (Server.CAFile).
	TLS bool
	// ClientCertAuth (implies TLS) makes etcd require a client certificate signed by that CA
	// (Server.ClientCertFile, Server.ClientKeyFile).
	ClientCertAuth bool
	// Auth enables etcd authentication: user "root" (RootPassword), user User (Password) whose role
	// may read and write every key under AuthPrefix, and user Outsider (Password) whose role covers
	// only OutsiderPrefix.
	Auth bool
	// AuthPrefix is the key prefix User may read and write; required with Auth.
	AuthPrefix string
}

// Users of an etcd started with Options.Auth.
const (
	RootPassword   = "root-secret"
	User           = "promptgate"
	Outsider       = "outsider"
	Password       = "promptgate-secret"
	OutsiderPrefix = "/elsewhere/"
)

// Server is one embedded etcd member.
type Server struct {
	t                          testing.TB
	dir                        string
	public, clientURL, peerURL url.URL
	opts                       Options
	// CAFile is the PEM CA that signed the server (and client) certificates, with Options.TLS.
	CAFile string
	// ClientCertFile and ClientKeyFile are a client certificate signed by CAFile, with Options.TLS.
	ClientCertFile, ClientKeyFile string
	serverCert, serverKey         string

	ln    net.Listener   // the advertised port, bound from start to cleanup
	done  chan struct{}  // closed when accept returns
	pipes sync.WaitGroup // connections being forwarded

	mu    sync.Mutex
	e     *embed.Etcd
	up    bool           // the forwarder passes connections on
	down  func(net.Conn) // takes connections while etcd is down (WhileDown), or nil to close them
	conns map[net.Conn]bool
}

// Start starts etcd (plain, no auth) and stops it when the test ends.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith starts etcd with client TLS and/or authentication, and stops it when the test ends.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	if o.ClientCertAuth {
		o.TLS = true
	}
	if o.Auth && (o.AuthPrefix == "" || o.AuthPrefix == OutsiderPrefix) {
		t.Fatalf("etcdtest: Auth needs an AuthPrefix other than %s", OutsiderPrefix)
	}
	s := &Server{t: t, dir: t.TempDir(), conns: map[net.Conn]bool{}, opts: o}
	scheme := "http"
	if o.TLS {
		scheme = "https"
		s.writeCerts()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.ln, s.done = ln, make(chan struct{})
	go s.accept()
	s.public = url.URL{Scheme: scheme, Host: ln.Addr().String()}
	s.clientURL = url.URL{Scheme: scheme, Host: freeAddr(t)}
	s.peerURL = url.URL{Scheme: "http", Host: freeAddr(t)}
	t.Cleanup(func() {
		s.Stop()
		_ = s.ln.Close()
		<-s.done
	})
	s.Restart()
	if o.Auth {
		s.enableAuth()
	}
	return s
}

// ClientTLS is a client configuration trusting CAFile, with the client certificate when withCert
// (nil without Options.TLS).
func (s *Server) ClientTLS(withCert bool) *tls.Config {
	s.t.Helper()
	if !s.opts.TLS {
		return nil
	}
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		s.t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if withCert {
		pair, err := tls.LoadX509KeyPair(s.ClientCertFile, s.ClientKeyFile)
		if err != nil {
			s.t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// enableAuth creates the users and roles of Options.Auth and enables authentication.
func (s *Server) enableAuth() {
	s.t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.clientURL.String()},
		DialTimeout: 10 * time.Second,
		TLS:         s.ClientTLS(s.opts.ClientCertAuth),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		s.t.Fatalf("etcdtest: admin client: %v", err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	grant := func(user, prefix string) error {
		role := user + "-role"
		if _, err := cli.RoleAdd(ctx, role); err != nil {
			return err
		}
		if _, err := cli.RoleGrantPermission(ctx, role, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
			return err
		}
		if _, err := cli.UserAdd(ctx, user, Password); err != nil {
			return err
		}
		_, err := cli.UserGrantRole(ctx, user, role)
		return err
	}
	steps := []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", RootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { return grant(User, s.opts.AuthPrefix) },
		func() error { return grant(Outsider, OutsiderPrefix) },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	}
	for _, f := range steps {
		if err := f(); err != nil {
			s.t.Fatalf("etcdtest: set up auth: %v", err)
		}
	}
}

// writeCerts makes a CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files
// in the test's temporary folder.
func (s *Server) writeCerts() {
	s.t.Helper()
	dir := s.t.TempDir()
	caCert, caKey := NewCA(s.t, filepath.Join(dir, "ca.pem"))
	s.CAFile = filepath.Join(dir, "ca.pem")
	s.serverCert, s.serverKey = filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	s.ClientCertFile, s.ClientKeyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	issue(s.t, caCert, caKey, "etcd", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, s.serverCert, s.serverKey)
	issue(s.t, caCert, caKey, "promptgate-client", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, s.ClientCertFile, s.ClientKeyFile)
}

// NewCA makes a self-signed CA and writes its certificate as PEM to path (a CA the etcd does not
// know, for tests of a wrong CA).
func NewCA(t testing.TB, path string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "etcdtest CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "CERTIFICATE", der)
	return cert, key
}

// issue writes a certificate for 127.0.0.1 signed by ca, and its key.
func issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, usage []x509.ExtKeyUsage, certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "EC PRIVATE KEY", kder)
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Endpoint is the client URL, "http://127.0.0.1:PORT" (https with Options.TLS).
func (s *Server) Endpoint() string { return s.public.String() }

// HostPort is the client address, "127.0.0.1:PORT".
func (s *Server) HostPort() string { return s.public.Host }

// Stop cuts every client connection and stops etcd (idempotent); until Restart, the forwarder
// closes every new connection.
func (s *Server) Stop() {
	s.mu.Lock()
	s.up = false
	for c := range s.conns {
		_ = c.Close()
	}
	e := s.e
	s.e = nil
	s.mu.Unlock()
	s.pipes.Wait()
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
	cfg.BcryptCost = 4 // bcrypt.MinCost: fast user creation and login in tests
	if s.opts.TLS {
		cfg.ClientTLSInfo = transport.TLSInfo{CertFile: s.serverCert, KeyFile: s.serverKey}
		if s.opts.ClientCertAuth {
			// etcd requires client certificates whenever it is given a trusted CA.
			cfg.ClientTLSInfo.TrustedCAFile, cfg.ClientTLSInfo.ClientCertAuth = s.CAFile, true
		}
	}
	e, err := startEtcd(cfg)
	if err != nil {
		// Another socket took an internal port while etcd was down: move etcd's own listeners; the
		// advertised port, which clients use, stays.
		s.clientURL.Host, s.peerURL.Host = freeAddr(s.t), freeAddr(s.t)
		cfg.ListenClientUrls = []url.URL{s.clientURL}
		cfg.ListenPeerUrls = []url.URL{s.peerURL}
		e, err = startEtcd(cfg)
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
	s.e, s.up, s.down = e, true, nil
}

// WhileDown hands every connection to the advertised port to fn until Restart (for a test to play
// another server there); it is only for a stopped Server.
func (s *Server) WhileDown(fn func(net.Conn)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.up {
		s.t.Fatal("etcdtest: WhileDown on a running server")
	}
	s.down = fn
}

// startEtcd starts etcd, retrying for a while: after Stop, the kernel may take a moment to release
// the ports.
func startEtcd(cfg *embed.Config) (e *embed.Etcd, err error) {
	for range 20 {
		if e, err = embed.StartEtcd(cfg); err == nil {
			return e, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}

// accept forwards every connection of the advertised port to etcd's client port while etcd is up,
// and closes it otherwise.
func (s *Server) accept() {
	defer close(s.done)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		up, down, target := s.up, s.down, s.clientURL.Host
		s.mu.Unlock()
		switch {
		case !up && down != nil:
			go down(c)
			continue
		case !up:
			_ = c.Close()
			continue
		}
		dst, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		s.mu.Lock()
		if !s.up {
			s.mu.Unlock()
			_ = c.Close()
			_ = dst.Close()
			continue
		}
		s.conns[c], s.conns[dst] = true, true
		s.pipes.Add(2)
		s.mu.Unlock()
		pipe := func(to, from net.Conn) {
			defer s.pipes.Done()
			_, _ = io.Copy(to, from) // ends when either side closes
			_ = to.Close()
			_ = from.Close()
			s.mu.Lock()
			delete(s.conns, to)
			delete(s.conns, from)
			s.mu.Unlock()
		}
		go pipe(dst, c)
		go pipe(c, dst)
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
