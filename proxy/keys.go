package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/promptgate/promptgate/proxy/origin"
)

// Key is an operator's API key bound to the one origin it may be sent to. The binding is made once,
// from the configured upstream, and travels with the key: a Server that forwards to any other
// origin (the HTTPS-proxy door builds one per origin a client names) leaves the client's own
// credentials as they are.
type Key struct {
	// Secret is the key; "" means no key.
	Secret string
	// Origin is where Secret may go; a Key with a Secret and no Origin is refused by New.
	Origin origin.Origin
}

// BindKey binds secret to the origin of base (a configured upstream URL). An empty secret gives the
// zero Key.
func BindKey(secret string, base *url.URL) (Key, error) {
	if secret == "" {
		return Key{}, nil
	}
	o, err := origin.Of(base)
	if err != nil {
		return Key{}, fmt.Errorf("proxy: key for %s: %w", base.Redacted(), err)
	}
	return Key{Secret: secret, Origin: o}, nil
}

// sendsTo reports whether the key may be sent to the request URL u: it has a secret and u's origin
// is its own.
func (k Key) sendsTo(u *url.URL) bool {
	if k.Secret == "" {
		return false
	}
	o, err := origin.Of(u)
	return err == nil && o == k.Origin
}

// maskKeys keeps the operator keys that an upstream echoes (in an error message, a header, a
// stream) from the client, who must never learn them: in the answer to a request that carried one,
// every occurrence of it in the headers, the body and the trailers is overwritten with '*'. The
// length is kept, so a Content-Length stays right. An upgraded connection's body (a WebSocket) is
// not read.
func (s *Server) maskKeys(resp *http.Response) {
	var keys [][]byte
	sent := resp.Request.Header
	for _, up := range s.upstreams {
		if k := up.key; k.Secret != "" && up.Auth.carries(sent, k.Secret) {
			keys = append(keys, []byte(k.Secret))
		}
	}
	if len(keys) == 0 {
		return
	}
	maskHeader(resp.Header, keys)
	maskHeader(resp.Trailer, keys)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body = &keyMask{body: resp.Body, keys: keys, resp: resp}
	}
}

// maskHeader masks the keys in every value of h.
func maskHeader(h http.Header, keys [][]byte) {
	for _, vs := range h {
		for i, v := range vs {
			b := []byte(v)
			if maskAll(b, keys) {
				vs[i] = string(b)
			}
		}
	}
}

// maskAll overwrites every occurrence of the keys in b with '*' and reports whether there was one.
func maskAll(b []byte, keys [][]byte) bool {
	masked := false
	for _, k := range keys {
		for i := bytes.Index(b, k); i >= 0; i = bytes.Index(b, k) {
			copy(b[i:i+len(k)], bytes.Repeat([]byte{'*'}, len(k)))
			masked = true
		}
	}
	return masked
}

// keyMask is a response body with the keys masked. A key may straddle two reads: the end of what
// was read that could begin a key is held back until the next read shows whether it does; anything
// else goes out at once, so that a stream's events are not delayed.
type keyMask struct {
	body  io.ReadCloser
	keys  [][]byte
	resp  *http.Response
	store []byte // the buffer reads go to, made at the first read
	buf   []byte // read from body (in store), masked, not yet given out
	err   error  // body's error, once it failed or ended
}

// keyMaskBuffer is the size of a keyMask's buffer, the reverse proxy's copy buffer's.
const keyMaskBuffer = 32 << 10

func (m *keyMask) Read(p []byte) (int, error) {
	for {
		ready := len(m.buf)
		if m.err == nil {
			ready -= m.keyStart()
		}
		if ready > 0 {
			n := copy(p, m.buf[:ready])
			m.buf = m.buf[n:]
			return n, nil
		}
		if m.err != nil {
			if len(m.buf) == 0 {
				maskHeader(m.resp.Trailer, m.keys) // the transport fills trailers in at the end
			}
			return 0, m.err
		}
		// What is held (shorter than a key) moves to the front; the body's next bytes follow it.
		if m.store == nil {
			m.store = make([]byte, keyMaskBuffer)
		}
		held := copy(m.store, m.buf)
		n, err := m.body.Read(m.store[held:])
		m.buf = m.store[:held+n]
		maskAll(m.buf, m.keys)
		m.err = err
	}
}

// keyStart is the length of the longest end of buf that is the beginning of a key (a key that is
// not whole).
func (m *keyMask) keyStart() int {
	longest := 0
	for _, k := range m.keys {
		for n := min(len(k)-1, len(m.buf)); n > longest; n-- {
			if bytes.Equal(m.buf[len(m.buf)-n:], k[:n]) {
				longest = n
				break
			}
		}
	}
	return longest
}

func (m *keyMask) Close() error { return m.body.Close() }
