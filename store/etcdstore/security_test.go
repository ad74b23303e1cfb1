package etcdstore_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptgate/promptgate/store/etcdstore"
	"github.com/promptgate/promptgate/store/etcdstore/etcdtest"
)

// mustServe checks that s reads and writes its prefix.
func mustServe(t *testing.T, s *etcdstore.Etcd) {
	t.Helper()
	ctx := context.Background()
	snap, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Templates) == 0 {
		t.Fatal("seeded prefix has no templates")
	}
	if err := s.SetToolEnabled(ctx, "shell", false, "test"); err != nil {
		t.Fatal(err)
	}
}

// openErr opens the store and wants an error that names the endpoint and every one of want.
func openErr(t *testing.T, o etcdstore.Options, want ...string) {
	t.Helper()
	o.DialTimeout = 2 * time.Second
	start := time.Now()
	s, err := etcdstore.Open(context.Background(), o)
	if err == nil {
		_ = s.Close()
		t.Fatalf("Open succeeded; want an error naming %q", want)
	}
	t.Logf("error after %v: %v", time.Since(start).Round(time.Millisecond), err)
	for _, w := range append([]string{o.Endpoints[0]}, want...) {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
}

func TestTLS(t *testing.T) {
	srv := etcdtest.StartWith(t, etcdtest.Options{TLS: true})
	mustServe(t, open(t, srv.Endpoint(), "/tls/", func(o *etcdstore.Options) { o.TLS = srv.ClientTLS(false) }))

	t.Run("no CA", func(t *testing.T) {
		openErr(t, etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: "/tls/", TLS: &tls.Config{MinVersion: tls.VersionTLS12}},
			"server certificate is not trusted", "unknown authority")
	})
	t.Run("wrong CA", func(t *testing.T) {
		other := filepath.Join(t.TempDir(), "other-ca.pem")
		ca, _ := etcdtest.NewCA(t, other)
		cfg := srv.ClientTLS(false)
		cfg.RootCAs = x509.NewCertPool()
		cfg.RootCAs.AddCert(ca)
		openErr(t, etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: "/tls/", TLS: cfg}, "server certificate is not trusted", "unknown authority")
	})
	t.Run("TLS breaks while running", func(t *testing.T) {
		// Connected, then the endpoint serves a certificate the store does not trust: the reason
		// says so.
		reasons := make(chan string, 100)
		st := open(t, srv.Endpoint(), "/tls/", func(o *etcdstore.Options) {
			o.TLS = srv.ClientTLS(false)
			o.OnState = func(ok bool, reason string) {
				if !ok {
					reasons <- reason
				}
			}
		})
		mustServe(t, st)
		srv.Stop()
		defer srv.Restart()
		ca, key := etcdtest.NewCA(t, filepath.Join(t.TempDir(), "imposter.pem"))
		imposter := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{ca.Raw}, PrivateKey: key}}}
		srv.WhileDown(func(c net.Conn) {
			tc := tls.Server(c, imposter)
			_ = tc.Handshake()
			_ = tc.Close()
		})
		deadline := time.After(10 * time.Second)
		for {
			select {
			case r := <-reasons:
				t.Logf("reason: %s", r)
				if strings.Contains(r, "server certificate is not trusted") {
					return
				}
			case <-deadline:
				t.Fatal("no disconnected reason names the untrusted certificate")
			}
		}
	})
	t.Run("plain http to a TLS port", func(t *testing.T) {
		openErr(t, etcdstore.Options{Endpoints: []string{"http://" + srv.HostPort()}, Prefix: "/tls/"}, "serves TLS")
	})
}

func TestMutualTLS(t *testing.T) {
	srv := etcdtest.StartWith(t, etcdtest.Options{ClientCertAuth: true})
	mustServe(t, open(t, srv.Endpoint(), "/mtls/", func(o *etcdstore.Options) { o.TLS = srv.ClientTLS(true) }))
	t.Run("no client certificate", func(t *testing.T) {
		openErr(t, etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: "/mtls/", TLS: srv.ClientTLS(false)}, "client certificate missing", "certificate required")
	})
}

func TestAuth(t *testing.T) {
	srv := etcdtest.StartWith(t, etcdtest.Options{Auth: true, AuthPrefix: "/fleet/"})
	auth := func(user, pw string) func(*etcdstore.Options) {
		return func(o *etcdstore.Options) { o.Username, o.Password = user, pw }
	}
	mustServe(t, open(t, srv.Endpoint(), "/fleet/", auth(etcdtest.User, etcdtest.Password)))

	t.Run("no credentials", func(t *testing.T) {
		openErr(t, etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: "/fleet/"}, "/fleet/")
	})
	t.Run("wrong password", func(t *testing.T) {
		openErr(t, etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: "/fleet/", Username: etcdtest.User, Password: "wrong"},
			"refused the login", etcdtest.User, "authentication failed")
	})
	t.Run("role does not cover the prefix", func(t *testing.T) {
		// A snapshot file must not hide the refusal: etcd answered.
		snap := filepath.Join(t.TempDir(), "snap.json")
		st := open(t, srv.Endpoint(), "/fleet/", func(o *etcdstore.Options) {
			o.Username, o.Password, o.SnapshotFile = etcdtest.User, etcdtest.Password, snap
		})
		mustServe(t, st)
		_ = st.Close()
		if _, err := os.Stat(snap); err != nil {
			t.Fatalf("no snapshot file written: %v", err)
		}
		openErr(t, etcdstore.Options{Endpoints: []string{srv.Endpoint()}, Prefix: "/fleet/", Username: etcdtest.Outsider, Password: etcdtest.Password, SnapshotFile: snap},
			"permission denied", "/fleet/")
	})

	t.Run("etcd down at start serves the snapshot file, then logs in", func(t *testing.T) {
		snap := filepath.Join(t.TempDir(), "snap.json")
		auth := func(o *etcdstore.Options) {
			o.Username, o.Password, o.SnapshotFile = etcdtest.User, etcdtest.Password, snap
		}
		st := open(t, srv.Endpoint(), "/fleet/", auth)
		mustServe(t, st)
		_ = st.Close()
		srv.Stop()
		st = open(t, srv.Endpoint(), "/fleet/", func(o *etcdstore.Options) {
			auth(o)
			o.DialTimeout = 2 * time.Second // etcd is down: Open gives up on it after this and reads the file
		})
		if ok, _ := st.Connected(); ok {
			t.Fatal("etcd is down but the store says connected")
		}
		srv.Restart()
		eventually(t, "reconnected", func() bool { ok, _ := st.Connected(); return ok })
		mustServe(t, st)
	})
}
