// Package mitm is promptgate's HTTPS-proxy door (HTTPS_PROXY=): a forward proxy built on goproxy
// that intercepts CONNECTs to the allowlisted hosts with leaf certificates signed by the operator's
// own CA and hands their requests to the same pipeline as the base-URL listener; every other
// CONNECT is tunnelled untouched (or refused). It owns the CA files, leaf certificates, the CONNECT
// dispatch, proxy authentication and where passthrough may connect (never loopback, private or
// promptgate's own listeners unless allowed); it never uses goproxy's built-in CA nor skips
// verification of the real upstream. It does not rewrite, vet or add credentials itself: the
// handler it is given per origin does.
package mitm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// File names written by WriteCA.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// caValidity is how long a CA made by WriteCA is valid.
const caValidity = 5 * 365 * 24 * time.Hour

// WriteCA creates dir if needed and writes a new CA: dir/ca.crt (0644) and dir/ca.key (0600). It
// refuses to overwrite existing files unless force is set.
func WriteCA(dir string, force bool) (certPath, keyPath string, err error) {
	certPath, keyPath = filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	if !force {
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Stat(p); err == nil {
				return "", "", fmt.Errorf("mitm: %s exists; keep it, or pass --force to replace the CA (clients must then trust the new one)", p)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("mitm: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("mitm: ca key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return "", "", fmt.Errorf("mitm: %w", err)
	}
	now := time.Now()
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "promptgate local CA", Organization: []string{"promptgate"}, OrganizationalUnit: []string{host}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", fmt.Errorf("mitm: ca certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("mitm: %w", err)
	}
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	if err := writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return fmt.Errorf("mitm: %w", err)
	}
	if err := f.Chmod(mode); err != nil { // an existing file keeps its mode otherwise
		f.Close()
		return fmt.Errorf("mitm: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("mitm: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("mitm: %w", err)
	}
	return nil
}

// LoadCA reads the CA written by WriteCA (or any PEM CA certificate and key pair).
func LoadCA(certPath, keyPath string) (tls.Certificate, error) {
	ca, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("mitm: load CA %s / %s: %w", certPath, keyPath, err)
	}
	leaf, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("mitm: CA %s: %w", certPath, err)
	}
	if !leaf.IsCA {
		return tls.Certificate{}, fmt.Errorf("mitm: %s is not a CA certificate (basic constraints CA:FALSE)", certPath)
	}
	if time.Now().After(leaf.NotAfter) {
		return tls.Certificate{}, fmt.Errorf("mitm: CA %s expired on %s; run `promptgate ca init --force`", certPath, leaf.NotAfter.Format(time.DateOnly))
	}
	ca.Leaf = leaf
	return ca, nil
}

// Roots returns the system roots plus the PEM certificates of extraPEM (the config's upstreamCA),
// if given.
func Roots(extraPEM string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if extraPEM == "" {
		return pool, nil
	}
	data, err := os.ReadFile(extraPEM)
	if err != nil {
		return nil, fmt.Errorf("mitm: upstreamCA: %w", err)
	}
	if !pool.AppendCertsFromPEM(data) {
		return nil, errors.New("mitm: upstreamCA " + extraPEM + ": no PEM certificate in it")
	}
	return pool, nil
}
