package proxy

import (
	"fmt"
	"net/url"

	"github.com/promptgate/promptgate/proxy/origin"
)

// Key is an operator's API key bound to the one origin it may be sent to. The binding is made once, from the
// configured upstream, and travels with the key: a Server that forwards to any other origin (the HTTPS-proxy
// door builds one per origin a client names) leaves the client's own credentials as they are.
type Key struct {
	// Secret is the key; "" means no key.
	Secret string
	// Origin is where Secret may go; a Key with a Secret and no Origin is refused by New.
	Origin origin.Origin
}

// BindKey binds secret to the origin of base (a configured upstream URL). An empty secret gives the zero Key.
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

// sendsTo reports whether the key may be sent to the request URL u: it has a secret and u's origin is its own.
func (k Key) sendsTo(u *url.URL) bool {
	if k.Secret == "" {
		return false
	}
	o, err := origin.Of(u)
	return err == nil && o == k.Origin
}
