package mitm

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
)

// leafValidity is how long a leaf certificate is used before a new one is made.
const leafValidity = 24 * time.Hour

// Options configure the door.
type Options struct {
	// CA signs the leaf certificates of intercepted hosts (LoadCA).
	CA tls.Certificate
	// Hosts are the host names to intercept (exact, case-insensitive), on any port.
	Hosts []string
	// Passthrough tunnels every other CONNECT untouched; false answers them 403.
	Passthrough bool
	// Handler returns the pipeline for an intercepted origin, e.g. ("https", "api.openai.com:443").
	// It is called once per origin and cached.
	Handler func(scheme, hostport string) (http.Handler, error)
	// Dial opens tunnels and plain-HTTP connections to other hosts; nil dials directly.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Transport forwards plain-HTTP requests to hosts that are not intercepted; nil makes one with Dial.
	Transport *http.Transport
	Log       *slog.Logger
}

// Door is the HTTPS-proxy listener's handler.
type Door struct {
	opt      Options
	hosts    map[string]bool
	gp       *goproxy.ProxyHttpServer
	leafKey  *ecdsa.PrivateKey
	mu       sync.Mutex
	leaves   map[string]*tls.Certificate
	handlers map[string]http.Handler
}

// New builds the door.
func New(o Options) (*Door, error) {
	if o.CA.Leaf == nil || o.Handler == nil {
		return nil, errors.New("mitm: a loaded CA and a handler are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Dial == nil {
		o.Dial = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if o.Transport == nil {
		o.Transport = &http.Transport{Proxy: nil, DialContext: o.Dial, ForceAttemptHTTP2: false, IdleConnTimeout: 90 * time.Second}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mitm: leaf key: %w", err)
	}
	d := &Door{opt: o, hosts: map[string]bool{}, leafKey: key, leaves: map[string]*tls.Certificate{}, handlers: map[string]http.Handler{}}
	for _, h := range o.Hosts {
		d.hosts[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	gp := goproxy.NewProxyHttpServer()
	gp.Tr = o.Transport
	gp.ConnectDial = func(network, addr string) (net.Conn, error) { return o.Dial(context.Background(), network, addr) }
	gp.Logger = slogPrintf{o.Log}
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"status":"ok"}`)
			return
		}
		http.Error(w, "this is promptgate's HTTPS-proxy listener: set HTTPS_PROXY=http://"+r.Host+" in the client", http.StatusBadRequest)
	})
	gp.OnRequest().HandleConnectFunc(d.connect)
	gp.OnRequest().DoFunc(d.plain)
	d.gp = gp
	return d, nil
}

// intercepted reports whether hostport's host is allowlisted.
func (d *Door) intercepted(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return d.hosts[strings.ToLower(strings.TrimSuffix(host, "."))]
}

// ServeHTTP implements http.Handler: plain-HTTP proxy requests to intercepted hosts go to the pipeline,
// everything else to goproxy.
func (d *Door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodConnect && r.URL.IsAbs() && d.intercepted(r.URL.Host) {
		if r.URL.Scheme != "http" {
			http.Error(w, "only http:// URLs may be sent to a proxy in plain HTTP; use CONNECT for https", http.StatusBadRequest)
			return
		}
		h, err := d.handler("http", hostPort(r.URL.Host, "80"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Scheme, r2.URL.Host = "", ""
		r2.RequestURI = r.URL.RequestURI()
		r2.Header.Del("Proxy-Connection")
		r2.Header.Del("Proxy-Authorization")
		h.ServeHTTP(w, r2)
		return
	}
	d.gp.ServeHTTP(w, r)
}

// plain handles absolute-form requests to hosts that are not intercepted.
func (d *Door) plain(r *http.Request, _ *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	if d.opt.Passthrough {
		return r, nil
	}
	return r, goproxy.NewResponse(r, "text/plain", http.StatusForbidden, "promptgate: "+r.URL.Host+" is not an allowlisted host and passthrough is off\n")
}

// connect decides a CONNECT: intercept, tunnel untouched, or refuse.
func (d *Door) connect(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	if d.intercepted(host) {
		return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: d.hijack}, host
	}
	if d.opt.Passthrough {
		return &goproxy.ConnectAction{Action: goproxy.ConnectAccept}, host
	}
	d.opt.Log.Info("CONNECT refused: host not allowlisted and passthrough is off", "host", host)
	ctx.Resp = goproxy.NewResponse(ctx.Req, "text/plain", http.StatusForbidden, "promptgate: "+host+" is not an allowlisted host and passthrough is off\n")
	return &goproxy.ConnectAction{Action: goproxy.ConnectReject}, host
}

// hijack terminates TLS for an intercepted host with a leaf of our CA and serves HTTP/1.1 on the tunnel
// with the pipeline of that origin.
func (d *Door) hijack(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
	defer client.Close()
	hostport := hostPort(req.URL.Host, "443")
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	h, err := d.handler("https", hostport)
	if err != nil {
		d.opt.Log.Error("no pipeline for intercepted host", "host", hostport, "err", err)
		return
	}
	host, _, _ := net.SplitHostPort(hostport)
	tlsConn := tls.Server(client, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := host
			if hello.ServerName != "" && d.intercepted(hello.ServerName) {
				name = hello.ServerName
			}
			return d.leaf(name)
		},
	})
	if err := tlsConn.HandshakeContext(req.Context()); err != nil {
		d.opt.Log.Info("TLS handshake with client failed (does it trust promptgate's CA?)", "host", hostport, "err", err)
		return
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, ErrorLog: slog.NewLogLogger(d.opt.Log.Handler(), slog.LevelDebug)}
	_ = srv.Serve(newOneConnListener(tlsConn))
}

// handler returns the cached pipeline for an origin.
func (d *Door) handler(scheme, hostport string) (http.Handler, error) {
	key := scheme + "://" + hostport
	d.mu.Lock()
	defer d.mu.Unlock()
	if h, ok := d.handlers[key]; ok {
		return h, nil
	}
	h, err := d.opt.Handler(scheme, hostport)
	if err != nil {
		return nil, err
	}
	d.handlers[key] = h
	return h, nil
}

// leaf returns a cached certificate for host, signed by the CA.
func (d *Door) leaf(host string) (*tls.Certificate, error) {
	host = strings.ToLower(host)
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.leaves[host]; ok && time.Now().Before(c.Leaf.NotAfter.Add(-time.Hour)) {
		return c, nil
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host, Organization: []string{"promptgate"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	if tmpl.NotAfter.After(d.opt.CA.Leaf.NotAfter) {
		tmpl.NotAfter = d.opt.CA.Leaf.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, d.opt.CA.Leaf, &d.leafKey.PublicKey, d.opt.CA.PrivateKey)
	if err != nil {
		return nil, fmt.Errorf("mitm: leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, d.opt.CA.Certificate[0]}, PrivateKey: d.leafKey, Leaf: leaf}
	d.leaves[host] = c
	return c, nil
}

func hostPort(h, defPort string) string {
	if _, _, err := net.SplitHostPort(h); err == nil {
		return h
	}
	return net.JoinHostPort(strings.Trim(h, "[]"), defPort)
}

// oneConnListener serves exactly one connection, then reports closed once that connection is closed.
type oneConnListener struct {
	conn   net.Conn
	once   sync.Once
	closed chan struct{}
	taken  bool
	mu     sync.Mutex
}

func newOneConnListener(c net.Conn) *oneConnListener {
	l := &oneConnListener{closed: make(chan struct{})}
	l.conn = &notifyConn{Conn: c, onClose: func() { l.once.Do(func() { close(l.closed) }) }}
	return l
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.taken {
		l.taken = true
		l.mu.Unlock()
		return l.conn, nil
	}
	l.mu.Unlock()
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

type notifyConn struct {
	net.Conn
	onClose func()
}

func (c *notifyConn) Close() error {
	err := c.Conn.Close()
	c.onClose()
	return err
}

// slogPrintf adapts goproxy's Printf logger (only used with Verbose) to slog.
type slogPrintf struct{ l *slog.Logger }

func (s slogPrintf) Printf(format string, v ...any) { s.l.Debug(fmt.Sprintf(format, v...)) }
