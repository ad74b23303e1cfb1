package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/telemetry/redact"
	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/etcdstore"
)

// Environment of the fleet store.
const (
	EnvStore         = "PROMPTGATE_STORE"
	EnvStoreSnapshot = "PROMPTGATE_STORE_SNAPSHOT"
	EnvEtcdCACert    = "PROMPTGATE_ETCD_CACERT"
	EnvEtcdCert      = "PROMPTGATE_ETCD_CERT"
	EnvEtcdKey       = "PROMPTGATE_ETCD_KEY"
	EnvEtcdUsername  = "PROMPTGATE_ETCD_USERNAME"
	EnvEtcdPassword  = "PROMPTGATE_ETCD_PASSWORD"
	// EnvEtcdDialTimeout bounds the first contact with etcd and every call (a Go duration, default
	// 5s).
	EnvEtcdDialTimeout = "PROMPTGATE_ETCD_DIAL_TIMEOUT"
	// DefaultStoreSnapshot is where serve keeps the last snapshot read from etcd.
	DefaultStoreSnapshot = "promptgate.snapshot.json"
)

const storeForms = "use bbolt:PATH or etcd://HOST:PORT[,HOST:PORT]/PREFIX, e.g. etcd://127.0.0.1:2379/promptgate"

// storeSpec is a parsed --store value.
type storeSpec struct {
	raw       string
	boltPath  string   // bbolt backend when not empty
	endpoints []string // etcd backend: HOST:PORT each
	prefix    string   // etcd key prefix, "/NAME/"
}

func (s storeSpec) etcd() bool { return len(s.endpoints) > 0 }

func (s storeSpec) String() string {
	if s.etcd() {
		return "etcd://" + strings.Join(s.endpoints, ",") + s.prefix
	}
	return "bbolt:" + s.boltPath
}

// parseStoreSpec reads a store value of flag flagName; empty means the bbolt file db.
func parseStoreSpec(flagName, v, db string) (storeSpec, error) {
	bad := func(why string) error {
		return usageError{fmt.Sprintf("%s %q: %s; %s", flagName, redact.URL(v), why, storeForms)}
	}
	switch {
	case v == "":
		return storeSpec{raw: v, boltPath: db}, nil
	case strings.HasPrefix(v, "bbolt:"):
		p := strings.TrimPrefix(v, "bbolt:")
		if p == "" || strings.HasPrefix(p, "//") {
			return storeSpec{}, bad("give the file path after bbolt:")
		}
		return storeSpec{raw: v, boltPath: p}, nil
	case strings.HasPrefix(v, "etcd://"):
		rest := strings.TrimPrefix(v, "etcd://")
		hosts, prefix, ok := strings.Cut(rest, "/")
		if !ok || strings.Trim(prefix, "/") == "" {
			return storeSpec{}, bad("give a key prefix after the endpoints")
		}
		if strings.ContainsAny(prefix, "?#") || strings.ContainsAny(hosts, "@?#") {
			return storeSpec{}, bad("no user, query or fragment in the URL (credentials go in " + EnvEtcdUsername + "/" + EnvEtcdPassword + ")")
		}
		var eps []string
		for _, h := range strings.Split(hosts, ",") {
			host, port, err := net.SplitHostPort(h)
			if err != nil || host == "" {
				return storeSpec{}, bad(fmt.Sprintf("endpoint %q is not HOST:PORT", h))
			}
			if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
				return storeSpec{}, bad(fmt.Sprintf("endpoint %q has no valid port", h))
			}
			eps = append(eps, h)
		}
		return storeSpec{raw: v, endpoints: eps, prefix: "/" + strings.Trim(prefix, "/") + "/"}, nil
	}
	return storeSpec{}, bad("unknown form")
}

// etcdOptions builds the client options of spec from the environment (TLS, auth).
func etcdOptions(spec storeSpec, getenv env) (etcdstore.Options, error) {
	o := etcdstore.Options{Prefix: spec.prefix, Validate: proxy.ValidateDefinition, Links: proxy.CheckLinks}
	ca, cert, key := getenv(EnvEtcdCACert), getenv(EnvEtcdCert), getenv(EnvEtcdKey)
	if (cert == "") != (key == "") {
		return o, usageError{fmt.Sprintf("%s and %s go together (the client certificate and its key)", EnvEtcdCert, EnvEtcdKey)}
	}
	scheme := "http://"
	if ca != "" || cert != "" {
		scheme = "https://"
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return o, fmt.Errorf("%s: %w", EnvEtcdCACert, err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return o, fmt.Errorf("%s: %s holds no PEM certificate", EnvEtcdCACert, ca)
			}
			cfg.RootCAs = pool
		}
		if cert != "" {
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return o, fmt.Errorf("%s/%s: %w", EnvEtcdCert, EnvEtcdKey, err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		o.TLS = cfg
	}
	for _, h := range spec.endpoints {
		o.Endpoints = append(o.Endpoints, scheme+h)
	}
	if v := getenv(EnvEtcdDialTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return o, usageError{fmt.Sprintf("%s=%q: give a positive duration such as 5s", EnvEtcdDialTimeout, v)}
		}
		o.DialTimeout = d
	}
	o.Username, o.Password = getenv(EnvEtcdUsername), getenv(EnvEtcdPassword)
	if (o.Username == "") != (o.Password == "") {
		return o, usageError{fmt.Sprintf("%s and %s go together", EnvEtcdUsername, EnvEtcdPassword)}
	}
	return o, nil
}

// openStoreFlags opens the store the flags name: the bbolt file, or the etcd prefix. snapshot is
// the local snapshot file of an etcd store ("" for none: etcd must answer).
func openStoreFlags(ctx context.Context, sf *storeFlags, readOnly bool, getenv env, log *slog.Logger, snapshot string) (store.Store, error) {
	spec, err := parseStoreSpec("--store", sf.store, sf.db)
	if err != nil {
		return nil, err
	}
	if !spec.etcd() {
		return openStore(spec.boltPath, readOnly, log)
	}
	o, err := etcdOptions(spec, getenv)
	if err != nil {
		return nil, err
	}
	o.Logger = log
	o.SnapshotFile = snapshot
	return etcdstore.Open(ctx, o)
}

// storeConnected reports whether st reaches its backend (always true for the bbolt file), and why
// not.
func storeConnected(st store.Store) (bool, string) {
	if c, ok := st.(interface{ Connected() (bool, string) }); ok {
		return c.Connected()
	}
	return true, ""
}

var errStoreEmpty = errors.New("the source store is empty")

// storeName is the store the flags name, for logs.
func storeName(sf *storeFlags) string {
	spec, err := parseStoreSpec("--store", sf.store, sf.db)
	if err != nil {
		return redact.URL(sf.store)
	}
	return spec.String()
}
