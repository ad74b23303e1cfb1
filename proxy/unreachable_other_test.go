//go:build !unix

package proxy

import (
	"net"
	"testing"
)

// unreachableAddr is a 127.0.0.1 address where nothing listens: a listener's port, closed.
func unreachableAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}
