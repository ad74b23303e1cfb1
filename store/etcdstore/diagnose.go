package etcdstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// refused reports whether err is etcd's answer that the client may not read (no or bad credentials,
// a role without permission), as opposed to etcd not answering.
func refused(err error) bool {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.FailedPrecondition:
			return true
		}
	}
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// diagnoseBudget bounds tlsProblem, which runs after a failure has already taken the dial timeout.
const diagnoseBudget = time.Second

// http2Preface is what an HTTP/2 client sends first; after it, the server's TLS 1.3 verdict on the
// client certificate (which arrives after the handshake) can be read.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// tlsProblem finds why TLS to the endpoints fails, when it does: gRPC retries a failed handshake
// until the deadline and reports only "context deadline exceeded". With cfg nil (plain http) it
// reports an endpoint that serves TLS. It returns nil when it finds no TLS problem (etcd down,
// say). It takes at most timeout, capped at diagnoseBudget, for all the endpoints together.
func tlsProblem(ctx context.Context, endpoints []string, cfg *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, min(timeout, diagnoseBudget))
	defer cancel()
	deadline, _ := ctx.Deadline()
	for _, ep := range endpoints {
		host := ep
		if u, err := url.Parse(ep); err == nil && u.Host != "" {
			host = u.Host
		}
		c := &tls.Config{InsecureSkipVerify: true} // only to tell whether the endpoint serves TLS
		if cfg != nil {
			c = cfg.Clone()
		}
		c.NextProtos = []string{"h2"}
		if c.ServerName == "" {
			if h, _, err := net.SplitHostPort(host); err == nil {
				c.ServerName = h
			}
		}
		conn, err := (&tls.Dialer{Config: c}).DialContext(ctx, "tcp", host)
		if err == nil {
			tc := conn.(*tls.Conn)
			_ = tc.SetDeadline(deadline)
			if _, err = tc.Write([]byte(http2Preface)); err == nil {
				_, err = tc.Read(make([]byte, 1))
			}
			_ = tc.Close()
			if cfg == nil {
				return fmt.Errorf("%s serves TLS: give the CA certificate that signed its server certificate (https)", ep)
			}
		}
		if err == nil || cfg == nil {
			continue
		}
		var (
			alert  tls.AlertError
			verify *tls.CertificateVerificationError
			header tls.RecordHeaderError
		)
		switch {
		case errors.As(err, &verify):
			return fmt.Errorf("TLS to %s: the server certificate is not trusted (wrong or missing CA certificate?): %w", ep, err)
		case errors.As(err, &header):
			return fmt.Errorf("TLS to %s: the endpoint does not speak TLS (use plain http: no CA or client certificate): %w", ep, err)
		case errors.As(err, &alert), strings.Contains(err.Error(), "remote error: tls"):
			return fmt.Errorf("TLS to %s: the server refused the connection (client certificate missing or not signed by a CA it trusts?): %w", ep, err)
		}
	}
	return nil
}
