package mitm

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
)

// authorized reports whether a proxy request carries the door's token in Proxy-Authorization: as
// "Bearer <token>", or as "Basic" with the token as the password (any user name), which is what
// clients send for a proxy URL such as http://promptgate:TOKEN@127.0.0.1:8789. Without a token
// every request is.
func (d *Door) authorized(r *http.Request) bool {
	if d.tokenSum == nil {
		return true
	}
	scheme, cred, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Proxy-Authorization")), " ")
	cred = strings.TrimSpace(cred)
	switch {
	case strings.EqualFold(scheme, "Bearer"):
	case strings.EqualFold(scheme, "Basic"):
		b, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return false
		}
		_, pass, ok := strings.Cut(string(b), ":")
		if !ok {
			return false
		}
		cred = pass
	default:
		return false
	}
	// Hashing first makes the comparison constant-time in the token's length too.
	sum := sha256.Sum256([]byte(cred))
	return subtle.ConstantTimeCompare(sum[:], d.tokenSum[:]) == 1
}

// challenge answers a proxy request without the right token: 407 with both schemes offered.
func challenge(w http.ResponseWriter) {
	w.Header().Add("Proxy-Authenticate", `Basic realm="promptgate"`)
	w.Header().Add("Proxy-Authenticate", `Bearer realm="promptgate"`)
	http.Error(w, "promptgate: proxy authentication required: send Proxy-Authorization: Bearer <PROMPTGATE_PROXY_TOKEN>, or put the token as the password in the proxy URL (http://promptgate:TOKEN@HOST:PORT)", http.StatusProxyAuthRequired)
}
