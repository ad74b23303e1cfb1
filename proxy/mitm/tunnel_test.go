package mitm_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/promptgate/promptgate/proxy/mitm"
)

// echoService is a TCP server on loopback that writes back every byte it reads.
func echoService(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// echoes writes msg on the tunnel and reads it back.
func echoes(t *testing.T, c net.Conn, br *bufio.Reader, msg string) error {
	t.Helper()
	if _, err := io.WriteString(c, msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(br, got); err != nil {
		return err
	}
	if string(got) != msg {
		t.Fatalf("the tunnel echoed %q, want %q", got, msg)
	}
	return nil
}

// TestPassthroughTunnelsBounded: past mitm.maxTunnels open tunnels a CONNECT gets 503 and nothing
// is dialled; a closed tunnel frees its place.
func TestPassthroughTunnelsBounded(t *testing.T) {
	t.Parallel()
	dest := echoService(t)
	f := newFixture(t, true, true, func(o *mitm.Options) {
		o.Resolve = nil
		o.AllowPrivate = []string{"127.0.0.1"}
		o.MaxTunnels = 2
	})
	var open []net.Conn
	for i := range 2 {
		resp, c, br := f.connect(t, dest, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("tunnel %d: %d", i, resp.StatusCode)
		}
		if err := echoes(t, c, br, "hello"); err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		open = append(open, c)
	}
	resp, _, _ := f.connect(t, dest, "")
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third tunnel past maxTunnels 2: %d %q, want 503", resp.StatusCode, b)
	}
	open[0].Close()
	// The door frees the place once both directions of the closed tunnel have ended.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, c, br := f.connect(t, dest, "")
		if resp.StatusCode == http.StatusOK {
			if err := echoes(t, c, br, "again"); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one of two tunnels closed, a new CONNECT still gets %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPassthroughTunnelIdle: a tunnel that carries nothing either way for mitm.tunnelIdleTimeout is
// closed; one in use is not.
func TestPassthroughTunnelIdle(t *testing.T) {
	t.Parallel()
	dest := echoService(t)
	f := newFixture(t, true, true, func(o *mitm.Options) {
		o.Resolve = nil
		o.AllowPrivate = []string{"127.0.0.1"}
		o.TunnelIdleTimeout = time.Second
	})
	resp, c, br := f.connect(t, dest, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	for range 50 { // 2.5 s of use, more than twice the idle timeout
		if err := echoes(t, c, br, "ping"); err != nil {
			t.Fatalf("a tunnel in use was closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Now silent: the door closes it. connect's read deadline (20 s) only keeps a broken door from
	// hanging.
	_, err := br.ReadByte()
	if os.IsTimeout(err) {
		t.Fatal("the idle tunnel is still open")
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("read on the idle tunnel: %v, want it closed (EOF)", err)
	}
}

// TestTunnelLimitsValidate: negative limits are refused naming the key.
func TestTunnelLimitsValidate(t *testing.T) {
	t.Parallel()
	c := mitm.Config{CACert: "a", CAKey: "b", MaxTunnels: -1, TunnelIdleTimeout: -time.Second}
	errs := errors.Join(c.Validate("mitm")...)
	for _, want := range []string{"mitm.maxTunnels", "mitm.tunnelIdleTimeout"} {
		if errs == nil || !strings.Contains(errs.Error(), want) {
			t.Errorf("Validate: %v, want it to name %s", errs, want)
		}
	}
	c = mitm.Config{}
	c.ApplyDefaults()
	if c.MaxTunnels != mitm.DefaultMaxTunnels || c.TunnelIdleTimeout != mitm.DefaultTunnelIdleTimeout {
		t.Errorf("defaults: %d %v", c.MaxTunnels, c.TunnelIdleTimeout)
	}
}
