package mitm

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxTunnels bounds the passthrough tunnels open at once when Options.MaxTunnels is 0.
const DefaultMaxTunnels = 1024

// DefaultTunnelIdleTimeout closes a passthrough tunnel that carried no byte either way for this
// long when Options.TunnelIdleTimeout is 0. It is long because a tunnel's requests are opaque: a
// slow answer that the destination has not started looks idle.
const DefaultTunnelIdleTimeout = 15 * time.Minute

// errTunnelsFull is the error of a CONNECT past MaxTunnels.
var errTunnelsFull = errors.New("promptgate: the HTTPS-proxy door has as many passthrough tunnels open as mitm.maxTunnels allows; try again later")

// tunnels counts the passthrough tunnels open and closes those left idle.
type tunnels struct {
	max  int64
	idle time.Duration
	open atomic.Int64
}

// wrap counts c as an open tunnel, or closes it and returns errTunnelsFull when max are open. The
// tunnel is counted until c is closed.
func (t *tunnels) wrap(c net.Conn) (net.Conn, error) {
	if t.open.Add(1) > t.max {
		t.open.Add(-1)
		_ = c.Close()
		return nil, errTunnelsFull
	}
	tc := &tunnelConn{Conn: c, t: t}
	tc.touch()
	tc.timer = time.AfterFunc(t.idle, tc.check)
	if hc, ok := c.(interface {
		CloseWrite() error
		CloseRead() error
	}); ok {
		// goproxy half-closes each direction of a TCP tunnel at its end; keep that.
		return &halfTunnelConn{tunnelConn: tc, half: hc}, nil
	}
	return tc, nil
}

// tunnelConn is the destination side of a passthrough tunnel: every byte either way passes through
// it, so it sees when the tunnel was last used.
type tunnelConn struct {
	net.Conn
	t     *tunnels
	last  atomic.Int64 // unix nanoseconds of the last read or write
	timer *time.Timer
	once  sync.Once
}

func (c *tunnelConn) touch() { c.last.Store(time.Now().UnixNano()) }

// check closes the tunnel when it has been idle for the timeout, else waits for the rest of it.
func (c *tunnelConn) check() {
	rest := c.t.idle - time.Since(time.Unix(0, c.last.Load()))
	if rest <= 0 {
		_ = c.Close()
		return
	}
	c.timer.Reset(rest)
}

func (c *tunnelConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.touch()
	return n, err
}

func (c *tunnelConn) Write(p []byte) (int, error) {
	c.touch()
	n, err := c.Conn.Write(p)
	c.touch()
	return n, err
}

// Close closes the destination connection and frees the tunnel's place, once.
func (c *tunnelConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.timer.Stop()
		c.t.open.Add(-1)
	})
	return err
}

// halfTunnelConn is a tunnelConn over a connection that can be half-closed (TCP).
type halfTunnelConn struct {
	*tunnelConn
	half interface {
		CloseWrite() error
		CloseRead() error
	}
}

func (c *halfTunnelConn) CloseWrite() error { return c.half.CloseWrite() }
func (c *halfTunnelConn) CloseRead() error  { return c.half.CloseRead() }
