package mitm

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestNonPublicAddresses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ ip, class string }{
		{"127.0.0.1", "loopback"},
		{"127.255.0.9", "loopback"},
		{"::1", "loopback"},
		{"::ffff:127.0.0.1", "loopback"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"0.1.2.3", "reserved"},
		{"255.255.255.255", "reserved"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"10.0.0.1", "private"},
		{"172.16.5.4", "private"},
		{"192.168.1.1", "private"},
		{"::ffff:192.168.1.1", "private"},
		{"fd00::1", "private"},
		{"fc00::1", "private"},
		{"fec0::1", "private"},
		{"100.64.0.1", "shared (CGNAT, RFC 6598)"},
		{"100.127.255.254", "shared (CGNAT, RFC 6598)"},
		{"224.0.0.1", "link-local"},
		{"ff02::1", "link-local"},
		{"239.1.2.3", "multicast"},
		{"ff05::1", "multicast"},
		{"ff01::1", "multicast"},
		{"::7f00:1", "IPv4-compatible"},
		{"64:ff9b::7f00:1", "loopback (NAT64)"},
		{"64:ff9b::a00:1", "private (NAT64)"},
		{"64:ff9b:1::1", "private"},
		{"2002:7f00:1::1", "loopback (6to4)"},
		{"2002:c0a8:101::1", "private (6to4)"},
		{"192.0.2.2", "documentation"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.254", "benchmarking"},
		{"2001:2::1", "benchmarking"},
		{"192.0.0.8", "reserved"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.254", "reserved"},
		{"100::1", "reserved"},
		{"64:ff9b::c000:202", "documentation (NAT64)"},
		// public
		{"8.8.8.8", ""},
		{"192.0.3.1", ""},
		{"198.20.0.1", ""},
		{"203.0.114.1", ""},
		{"2001:db9::1", ""},
		{"1.1.1.1", ""},
		{"100.128.0.1", ""},
		{"172.32.0.1", ""},
		{"2606:4700::1111", ""},
		{"64:ff9b::808:808", ""},
		{"::ffff:8.8.8.8", ""},
	} {
		ip := netip.MustParseAddr(tc.ip).Unmap()
		if got := nonPublic(ip); got != tc.class {
			t.Errorf("nonPublic(%s) = %q, want %q", tc.ip, got, tc.class)
		}
	}
}

func TestOwnListenerMatch(t *testing.T) {
	t.Parallel()
	tcp := func(s string) net.Addr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, tc := range []struct {
		listener, dest string
		own            bool
	}{
		{"127.0.0.1:8788", "127.0.0.1:8788", true},
		{"127.0.0.1:8788", "127.0.0.2:8788", true},
		{"127.0.0.1:8788", "0.0.0.0:8788", true},
		{"127.0.0.1:8788", "127.0.0.1:8789", false},
		{"127.0.0.1:8788", "8.8.8.8:8788", false},
		{"[::1]:8788", "[::1]:8788", true},
		{"0.0.0.0:8788", "127.0.0.1:8788", true},
		{"[::]:8788", "[::1]:8788", true},
		{"0.0.0.0:8788", "8.8.8.8:8788", false},
		{"0.0.0.0:8788", "8.8.8.8:53", false},
	} {
		d := netip.MustParseAddrPort(tc.dest)
		if got := isOwn(tcp(tc.listener), d.Addr().Unmap(), d.Port(), interfaceAddrs); got != tc.own {
			t.Errorf("listener %s, destination %s: own %v, want %v", tc.listener, tc.dest, got, tc.own)
		}
	}
}

// TestEgressChecksEveryAddress: a name is refused when any of its addresses is refused (a rebinding
// answer mixes a public and a loopback address), before anything is dialled.
func TestEgressChecksEveryAddress(t *testing.T) {
	t.Parallel()
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("::ffff:127.0.0.1")}, nil
	}
	g, err := newEgress(nil, nil, resolve)
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.dial(context.Background(), "tcp", "rebind.example:80")
	var rf *refusal
	if !errors.As(err, &rf) || rf.dest != "rebind.example:80" {
		t.Fatalf("dial: %v, want a refusal", err)
	}
	for _, bad := range []string{"a b", "", "[fe80::1%eth0]"} {
		if _, err := newEgress([]string{bad}, nil, resolve); err == nil {
			t.Errorf("allow list entry %q accepted", bad)
		}
	}
	for _, addr := range []string{"example.com:99999", "exa mple.com:80"} {
		if _, err := g.dial(context.Background(), "tcp", addr); !errors.As(err, &rf) {
			t.Errorf("dial %s: %v, want a refusal", addr, err)
		}
	}
}

// TestEgressRefusesThisMachine: passthrough never reaches this machine by one of its own addresses,
// whatever range it is in (a public address of a cloud VM reaches every service bound to all
// interfaces), unless the address is listed; its own listeners stay refused, listed or not.
func TestEgressRefusesThisMachine(t *testing.T) {
	t.Parallel()
	mine := netip.MustParseAddr("93.184.215.14")
	local := func() ([]netip.Addr, error) { return []netip.Addr{netip.MustParseAddr("127.0.0.1"), mine}, nil }
	g, err := newEgress(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.local = local
	if rf := g.check("93.184.215.14", mine, 8080); rf == nil || !strings.Contains(rf.reason, "this machine") {
		t.Fatalf("an address of this machine: %v", rf)
	}
	if rf := g.check("example.com", netip.MustParseAddr("93.184.215.15"), 443); rf != nil {
		t.Fatalf("another public address: %v", rf)
	}
	g, err = newEgress([]string{"93.184.215.14"}, func() []net.Addr { return []net.Addr{&net.TCPAddr{IP: net.IPv4zero, Port: 8788}} }, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.local = local
	if rf := g.check("93.184.215.14", mine, 8080); rf != nil {
		t.Fatalf("a listed address of this machine: %v", rf)
	}
	if rf := g.check("93.184.215.14", mine, 8788); rf == nil {
		t.Fatal("an own listener by a listed address of this machine was not refused")
	}
	// The real interfaces: every address of this machine is refused.
	g, err = newEgress(nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP)
		if rf := g.check(ip.Unmap().String(), ip.Unmap(), 9); rf == nil {
			t.Errorf("%s, an address of this machine, is not refused", ip)
		}
	}
}
