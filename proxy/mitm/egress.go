package mitm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/promptgate/promptgate/proxy/origin"
)

// egress is the passthrough's dialler (CONNECT tunnels and plain-HTTP requests to hosts that are
// not intercepted). It resolves the host itself, refuses it when any of its addresses is not public
// (unless the host or the address is listed) or is one of promptgate's own listeners, and then
// dials only the addresses it checked, so that a name which resolves to loopback at dial time (DNS
// rebinding) is refused too.
type egress struct {
	hosts   map[string]bool     // listed host names, in origin.Host form
	ips     map[netip.Addr]bool // listed addresses, unmapped
	own     func() []net.Addr
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// local lists this machine's addresses: passthrough treats them as loopback.
	local  func() ([]netip.Addr, error)
	dialer net.Dialer
}

// refusal is the error of a destination the door does not reach.
type refusal struct {
	dest   string // as the client named it, host:port
	reason string
}

func (e *refusal) Error() string {
	return "promptgate: the HTTPS-proxy door does not reach " + e.dest + ": " + e.reason
}

func newEgress(allow []string, own func() []net.Addr, resolve func(ctx context.Context, host string) ([]netip.Addr, error)) (*egress, error) {
	g := &egress{hosts: map[string]bool{}, ips: map[netip.Addr]bool{}, own: own, resolve: resolve, local: interfaceAddrs,
		dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}
	for _, a := range allow {
		h, err := origin.Host(a)
		if err != nil {
			return nil, fmt.Errorf("mitm: allowPrivateDestinations: %w", err)
		}
		if ip, err := netip.ParseAddr(h); err == nil {
			g.ips[ip.Unmap()] = true
		} else {
			g.hosts[h] = true
		}
	}
	if g.own == nil {
		g.own = func() []net.Addr { return nil }
	}
	if g.resolve == nil {
		g.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	return g, nil
}

// dial checks every address of addr's host, then connects to the first checked address that
// answers.
func (g *egress) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("mitm: dial %q: %w", addr, err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return nil, &refusal{dest: addr, reason: "the port is not a number from 0 to 65535"}
	}
	name, err := origin.Host(host)
	if err != nil {
		return nil, &refusal{dest: addr, reason: err.Error()}
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(name); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = g.resolve(ctx, name); err != nil {
		return nil, fmt.Errorf("mitm: resolve %s: %w", name, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("mitm: resolve %s: no address", name)
	}
	for i, ip := range ips {
		ips[i] = ip.Unmap()
		if err := g.check(name, ips[i], uint16(port)); err != nil {
			err.dest = addr
			return nil, err
		}
	}
	var errs []error
	for _, ip := range ips {
		c, err := g.dialer.DialContext(ctx, network, netip.AddrPortFrom(ip, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// check refuses promptgate's own listeners always, and a non-public address or one of this
// machine's (which reaches every service bound to all its interfaces) unless name or ip is listed.
func (g *egress) check(name string, ip netip.Addr, port uint16) *refusal {
	for _, a := range g.own() {
		if isOwn(a, ip, port, g.local) {
			return &refusal{reason: netip.AddrPortFrom(ip, port).String() + " is one of promptgate's own listeners"}
		}
	}
	if g.hosts[name] || g.ips[ip] {
		return nil
	}
	const fix = "; list the host or the address in mitm.allowPrivateDestinations to reach it"
	if class := nonPublic(ip); class != "" {
		return &refusal{reason: fmt.Sprintf("%s is a %s address%s", ip, class, fix)}
	}
	if g.isLocal(ip) {
		return &refusal{reason: fmt.Sprintf("%s is an address of this machine%s", ip, fix)}
	}
	return nil
}

// isLocal reports whether ip is one of this machine's addresses; when they cannot be listed, every
// address is taken for one (refused rather than risk reaching this machine).
func (g *egress) isLocal(ip netip.Addr) bool {
	addrs, err := g.local()
	if err != nil {
		return true
	}
	for _, a := range addrs {
		if a.Unmap().WithZone("") == ip.WithZone("") {
			return true
		}
	}
	return false
}

// interfaceAddrs lists the addresses of this machine's interfaces.
func interfaceAddrs() ([]netip.Addr, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out, nil
}

// isOwn reports whether ip:port reaches the listener at a: the same address, or a wildcard
// listener's port on loopback, the unspecified address or an address of this machine (local lists
// them).
func isOwn(a net.Addr, ip netip.Addr, port uint16, local func() ([]netip.Addr, error)) bool {
	ta, ok := a.(*net.TCPAddr)
	if !ok || ta.Port != int(port) {
		return false
	}
	lip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return false
	}
	lip = lip.Unmap()
	switch {
	case lip == ip:
		return true
	case ip.IsUnspecified() || (ip.IsLoopback() && lip.IsLoopback()):
		return true
	case !lip.IsUnspecified():
		return false
	case ip.IsLoopback():
		return true
	}
	addrs, err := local()
	if err != nil {
		return true // unknown: refuse rather than risk reaching ourselves
	}
	return slices.Contains(addrs, ip)
}

// Address ranges that are not the public internet, beyond those netip names.
var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	sharedCGNAT = netip.MustParsePrefix("100.64.0.0/10")
	ipv4Compat  = netip.MustParsePrefix("::/96")
	siteLocal6  = netip.MustParsePrefix("fec0::/10")
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local  = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// nat64Embedded is where a NAT64 address holds its IPv4 address: its last 4 bytes.
const nat64Embedded = 12

// nonPublic names the class of an address that is not on the public internet ("loopback",
// "private", ...), or returns "" for a public one. ip is unmapped.
func nonPublic(ip netip.Addr) string {
	switch {
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsMulticast() || ip.IsInterfaceLocalMulticast():
		return "multicast"
	case ip.IsPrivate(), siteLocal6.Contains(ip), nat64Local.Contains(ip):
		return "private"
	case sharedCGNAT.Contains(ip):
		return "shared (CGNAT, RFC 6598)"
	case thisNetwork.Contains(ip):
		return "reserved"
	case ipv4Compat.Contains(ip):
		return "IPv4-compatible"
	case nat64Prefix.Contains(ip):
		b := ip.As16()
		if c := nonPublic(netip.AddrFrom4([4]byte(b[nat64Embedded:]))); c != "" {
			return c + " (NAT64)"
		}
	case sixToFour.Contains(ip):
		b := ip.As16()
		if c := nonPublic(netip.AddrFrom4([4]byte(b[2:6]))); c != "" {
			return c + " (6to4)"
		}
	}
	for _, r := range specialPurpose {
		if r.prefix.Contains(ip) {
			return r.class
		}
	}
	return ""
}

// specialPurpose are the IANA special-purpose ranges (RFC 6890 and later) that are not globally
// reachable and that netip does not name: a network may still route them internally (as the
// documentation ranges on some hosts' own interfaces).
var specialPurpose = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("192.0.0.0/24"), "reserved"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // and 255.255.255.255
	{netip.MustParsePrefix("100::/64"), "reserved"},    // discard-only
	{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
	{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
	{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
	{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
	{netip.MustParsePrefix("3fff::/20"), "documentation"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("2001:2::/48"), "benchmarking"},
}
