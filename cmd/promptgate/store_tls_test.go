package main

import (
	"context"
	"io"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/promptgate/promptgate/store/etcdstore/etcdtest"
)

// TestServeEtcdTLSAuth runs serve against an etcd that requires client certificates and a login,
// with the PROMPTGATE_ETCD_* environment, and checks what a wrong setting says.
func TestServeEtcdTLSAuth(t *testing.T) {
	etcd := etcdtest.StartWith(t, etcdtest.Options{ClientCertAuth: true, Auth: true, AuthPrefix: "/fleet/"})
	up := fakeUpstream(t)
	spec := "etcd://" + etcd.HostPort() + "/fleet"
	good := map[string]string{
		EnvStore:        spec,
		EnvEtcdCACert:   etcd.CAFile,
		EnvEtcdCert:     etcd.ClientCertFile,
		EnvEtcdKey:      etcd.ClientKeyFile,
		EnvEtcdUsername: etcdtest.User,
		EnvEtcdPassword: etcdtest.Password,
	}
	dir := t.TempDir()
	snap := filepath.Join(dir, "snap.json")
	in := startInstance(t, with(good, map[string]string{"PROMPTGATE_DB": filepath.Join(dir, "a.db"), EnvStoreSnapshot: snap}), "--upstream", up.URL+"/v1")
	if code, body := in.get(t, in.root+"/readyz"); code != 200 {
		t.Fatalf("readyz %d %s", code, body)
	}
	if h, code := in.chat(t); code != 200 || !strings.HasSuffix(h, "@1") {
		t.Fatalf("chat over mTLS+auth etcd: %d %q", code, h)
	}

	for _, c := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		// A refusal is not "unreachable": serve does not fall back on the snapshot file A wrote.
		{"wrong password", map[string]string{EnvEtcdPassword: "wrong"}, []string{"refused the login", etcdtest.User, "authentication failed"}},
		{"role without the prefix", map[string]string{EnvEtcdUsername: etcdtest.Outsider}, []string{"refused to read prefix /fleet/", "permission denied"}},
		{"no client certificate", map[string]string{EnvEtcdCert: "", EnvEtcdKey: ""}, []string{etcd.HostPort(), "client certificate", "certificate required"}},
		{"no TLS settings", map[string]string{EnvEtcdCACert: "", EnvEtcdCert: "", EnvEtcdKey: ""}, []string{etcd.HostPort(), "serves TLS"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			e := with(good, c.env)
			e[EnvEtcdDialTimeout] = "1s"
			args := []string{"serve", "--db", filepath.Join(t.TempDir(), "x.db"), "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
				"--upstream", up.URL + "/v1"}
			if c.name == "wrong password" || c.name == "role without the prefix" {
				args = append(args, "--store-snapshot", snap)
			} else {
				// A TLS failure leaves etcd unreachable, which a snapshot file would cover
				// (degraded).
				args = append(args, "--store-snapshot", filepath.Join(t.TempDir(), "none.json"))
			}
			err := run(ctx, args, nil, io.Discard, io.Discard, envMap(e))
			if err == nil {
				t.Fatal("serve started")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// with is a copy of base with over applied.
func with(base, over map[string]string) map[string]string {
	m := maps.Clone(base)
	maps.Copy(m, over)
	return m
}
