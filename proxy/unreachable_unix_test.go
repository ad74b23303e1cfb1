//go:build unix

package proxy

import (
	"strconv"
	"syscall"
	"testing"
)

// unreachableAddr is a 127.0.0.1 address where nothing listens and nothing can start to while the
// test runs: a socket bound to the port and never listening holds it, so a connection is refused
// (a closed listener's port could be taken by another server of the same test run).
func unreachableAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("bound to %T", sa)
	}
	return "127.0.0.1:" + strconv.Itoa(in.Port)
}
