package mitm

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
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
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/promptgate/promptgate/proxy/origin"
)

// leafValidity is how long a leaf certificate is used before a new one is made.
const leafValidity = 24 * time.Hour

// DefaultMaxPipelines bounds the pipelines the door keeps, one per intercepted origin, when
// Options.MaxPipelines is 0.
const DefaultMaxPipelines = 256

// Options configure the door.
type Options struct {
	// CA signs the leaf certificates of intercepted hosts (LoadCA).
	CA tls.Certificate
	// Hosts are the host names to intercept (case-insensitive, a trailing dot ignored), on any
	// port.
	Hosts []string
	// Passthrough tunnels every other CONNECT untouched; false answers them 403.
	Passthrough bool
	// Handler returns the pipeline of an intercepted origin, e.g. https://api.openai.com:443
	// (always https). It is called when an origin is first used, and again after its pipeline was
	// dropped (MaxPipelines).
	Handler func(o origin.Origin) (http.Handler, error)
	// MaxPipelines bounds the pipelines kept, the least recently used dropped first; 0 means
	// DefaultMaxPipelines.
	MaxPipelines int
	// HandshakeTimeout closes an intercepted CONNECT whose client has not completed its TLS
	// handshake in time; 0 means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// HeaderReadTimeout and IdleTimeout are those of the listeners (limits.headerReadTimeout,
	// idleTimeout), kept by the HTTP server inside an intercepted tunnel: a request's headers must
	// come within the one, and a tunnel idle between requests longer than the other is closed.
	// Neither bounds a response. 0 means defaultHeaderReadTimeout, defaultIdleTimeout.
	HeaderReadTimeout, IdleTimeout time.Duration
	// MaxTunnels bounds the passthrough tunnels open at once; a CONNECT past it gets 503. 0 means
	// DefaultMaxTunnels.
	MaxTunnels int
	// TunnelIdleTimeout closes a passthrough tunnel that carried no byte either way for this long.
	// 0 means DefaultTunnelIdleTimeout.
	TunnelIdleTimeout time.Duration
	// AllowPrivate lists the host names and IP addresses that passthrough may reach although they
	// are loopback, link-local or private (the config's mitm.allowPrivateDestinations).
	AllowPrivate []string
	// Own returns promptgate's own listener addresses: passthrough never reaches them, listed or
	// not. nil means none.
	Own func() []net.Addr
	// Token, when set, must come with every proxy request (CONNECT or absolute-form) in
	// Proxy-Authorization; it is never forwarded.
	Token string
	// Resolve looks up the addresses of a passthrough host; nil means the system resolver. The door
	// dials only addresses it resolved and checked.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	Log     *slog.Logger
}

// Door is the HTTPS-proxy listener's handler.
type Door struct {
	opt      Options
	hosts    map[string]bool // intercepted, in origin.Host form
	gp       *goproxy.ProxyHttpServer
	tokenSum *[sha256.Size]byte
	leafKey  *ecdsa.PrivateKey
	// leaves holds a certificate per intercepted host name: at most len(hosts) entries.
	leafMu sync.Mutex
	leaves map[string]*tls.Certificate
	// pipelines holds a handler per intercepted origin, bounded; pipeMu makes each one built once.
	pipeMu    sync.Mutex
	pipelines *lru.Cache[origin.Origin, http.Handler]
	tunnels   *tunnels
}

// New builds the door.
func New(o Options) (*Door, error) {
	if o.CA.Leaf == nil || o.Handler == nil {
		return nil, errors.New("mitm: a loaded CA and a handler are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxPipelines <= 0 {
		o.MaxPipelines = DefaultMaxPipelines
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if o.MaxTunnels <= 0 {
		o.MaxTunnels = DefaultMaxTunnels
	}
	if o.TunnelIdleTimeout <= 0 {
		o.TunnelIdleTimeout = DefaultTunnelIdleTimeout
	}
	if o.HeaderReadTimeout <= 0 {
		o.HeaderReadTimeout = defaultHeaderReadTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = defaultIdleTimeout
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mitm: leaf key: %w", err)
	}
	pipelines, err := lru.New[origin.Origin, http.Handler](o.MaxPipelines)
	if err != nil {
		return nil, fmt.Errorf("mitm: %w", err)
	}
	eg, err := newEgress(o.AllowPrivate, o.Own, o.Resolve)
	if err != nil {
		return nil, err
	}
	d := &Door{opt: o, hosts: map[string]bool{}, leafKey: key, leaves: map[string]*tls.Certificate{}, pipelines: pipelines,
		tunnels: &tunnels{max: int64(o.MaxTunnels), idle: o.TunnelIdleTimeout}}
	for _, h := range o.Hosts {
		n, err := origin.Host(h)
		if err != nil {
			return nil, fmt.Errorf("mitm: hosts: %w", err)
		}
		d.hosts[n] = true
	}
	if o.Token != "" {
		sum := sha256.Sum256([]byte(o.Token))
		d.tokenSum = &sum
	}
	gp := goproxy.NewProxyHttpServer()
	gp.Tr = &http.Transport{Proxy: nil, DialContext: eg.dial, ForceAttemptHTTP2: false, IdleConnTimeout: 90 * time.Second}
	gp.ConnectDial = nil // goproxy's default follows HTTPS_PROXY of promptgate's own environment
	gp.ConnectDialWithReq = func(req *http.Request, network, addr string) (net.Conn, error) {
		c, err := eg.dial(req.Context(), network, addr)
		if err != nil {
			return nil, err
		}
		return d.tunnels.wrap(c)
	}
	gp.ConnectionErrHandler = d.tunnelFailed
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
	gp.OnResponse().DoFunc(d.plainFailed)
	d.gp = gp
	return d, nil
}

// intercepted reports whether hostport's host is allowlisted.
func (d *Door) intercepted(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	n, err := origin.Host(strings.Trim(host, "[]"))
	return err == nil && d.hosts[n]
}

// ServeHTTP implements http.Handler: proxy requests are authenticated (when a token is set),
// plain-HTTP requests to intercepted hosts are refused, and everything else goes to goproxy.
func (d *Door) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect || r.URL.IsAbs() {
		if !d.authorized(r) {
			challenge(w)
			return
		}
		r.Header.Del("Proxy-Authorization")
	}
	if r.Method != http.MethodConnect && r.URL.IsAbs() && d.intercepted(r.URL.Host) {
		// Their requests would carry credentials; promptgate sends them only over HTTPS.
		d.opt.Log.Info("plain-HTTP request to an intercepted host refused", "host", r.URL.Host)
		http.Error(w, "promptgate: "+r.URL.Host+" is intercepted and is only reached over HTTPS, never by a plain-HTTP proxy request, whose credentials would travel in cleartext: use an https:// URL (the client then sends CONNECT)", http.StatusForbidden)
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

// plainFailed turns a passthrough request whose destination was refused into a 403 that says why.
func (d *Door) plainFailed(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	var rf *refusal
	if resp != nil || !errors.As(ctx.Error, &rf) {
		return resp
	}
	d.opt.Log.Info("passthrough destination refused", "dest", rf.dest, "reason", rf.reason)
	return goproxy.NewResponse(ctx.Req, "text/plain", http.StatusForbidden, rf.Error()+"\n")
}

// tunnelFailed answers a CONNECT whose tunnel could not be opened: 403 for a refused destination,
// 503 past MaxTunnels, else 502.
func (d *Door) tunnelFailed(w io.Writer, _ *goproxy.ProxyCtx, err error) {
	status := http.StatusBadGateway
	var rf *refusal
	if errors.Is(err, errTunnelsFull) {
		status = http.StatusServiceUnavailable
		d.opt.Log.Warn("passthrough CONNECT refused: mitm.maxTunnels tunnels are open", "max", d.opt.MaxTunnels)
	} else if errors.As(err, &rf) {
		status = http.StatusForbidden
		d.opt.Log.Info("passthrough destination refused", "dest", rf.dest, "reason", rf.reason)
	}
	msg := err.Error() + "\n"
	if rw, ok := w.(http.ResponseWriter); ok {
		http.Error(rw, msg, status)
		return
	}
	_, _ = fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(msg), msg)
}

// connect decides a CONNECT: intercept, tunnel untouched, or refuse.
func (d *Door) connect(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
	if d.intercepted(host) {
		o, err := origin.New("https", host)
		if err != nil {
			ctx.Resp = goproxy.NewResponse(ctx.Req, "text/plain", http.StatusBadRequest, "promptgate: CONNECT "+host+": "+err.Error()+"\n")
			return &goproxy.ConnectAction{Action: goproxy.ConnectReject}, host
		}
		return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: func(_ *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
			d.hijack(o, client)
		}}, host
	}
	if d.opt.Passthrough {
		return &goproxy.ConnectAction{Action: goproxy.ConnectAccept}, host
	}
	d.opt.Log.Info("CONNECT refused: host not allowlisted and passthrough is off", "host", host)
	ctx.Resp = goproxy.NewResponse(ctx.Req, "text/plain", http.StatusForbidden, "promptgate: "+host+" is not an allowlisted host and passthrough is off\n")
	return &goproxy.ConnectAction{Action: goproxy.ConnectReject}, host
}

// hijack terminates TLS for an intercepted origin with a leaf of our CA and serves HTTP/1.1 on the
// tunnel with the pipeline of that origin. A client that does not complete its handshake within
// HandshakeTimeout is closed.
func (d *Door) hijack(o origin.Origin, client net.Conn) {
	defer client.Close()
	if err := client.SetDeadline(time.Now().Add(d.opt.HandshakeTimeout)); err != nil {
		return
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	host, _, _ := net.SplitHostPort(o.HostPort())
	host = strings.Trim(host, "[]")
	tlsConn := tls.Server(client, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := host
			if sni, err := origin.Host(hello.ServerName); err == nil && d.hosts[sni] {
				name = sni
			}
			return d.leaf(name)
		},
	})
	if err := tlsConn.Handshake(); err != nil {
		d.opt.Log.Info("TLS handshake with client failed (does it trust promptgate's CA?)", "origin", string(o), "err", err)
		return
	}
	if err := client.SetDeadline(time.Time{}); err != nil {
		return
	}
	h, err := d.pipeline(o)
	if err != nil {
		d.opt.Log.Error("no pipeline for intercepted origin", "origin", string(o), "err", err)
		return
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: d.opt.HeaderReadTimeout, IdleTimeout: d.opt.IdleTimeout,
		ErrorLog: slog.NewLogLogger(d.opt.Log.Handler(), slog.LevelDebug)}
	_ = srv.Serve(newOneConnListener(tlsConn))
}

// pipeline returns the pipeline of an origin, building it on first use; at most MaxPipelines are
// kept.
func (d *Door) pipeline(o origin.Origin) (http.Handler, error) {
	d.pipeMu.Lock()
	defer d.pipeMu.Unlock()
	if h, ok := d.pipelines.Get(o); ok {
		return h, nil
	}
	h, err := d.opt.Handler(o)
	if err != nil {
		return nil, err
	}
	d.pipelines.Add(o, h)
	return h, nil
}

// leaf returns a cached certificate for host, signed by the CA.
// host is an intercepted name in origin.Host form, so the cache holds at most one entry per host.
func (d *Door) leaf(host string) (*tls.Certificate, error) {
	d.leafMu.Lock()
	defer d.leafMu.Unlock()
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

// oneConnListener serves exactly one connection, then reports closed once that connection is
// closed.
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
