// Package owners remembers which client credential created each stored object that this instance
// relayed while it sent a shared upstream key (PROMPTGATE_UPSTREAM_API_KEY): every client then
// reaches the upstream as the operator, and the upstream cannot tell one client's stored responses
// and completions from another's. A Record binds each such object's id to a keyed digest of the
// credential of the client that created it, so that the proxy can answer another client's request
// for it as the upstream answers an id that does not exist.
//
// It owns the record only: which requests name which ids, and what a refusal looks like, belong to
// the surfaces (proxy/surface) and the proxy.
package owners

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"net/http"
	"sync"
)

// DefaultMax is how many ids a Record keeps, the oldest forgotten first.
const DefaultMax = 200_000

// credentialHeaders are the request headers a client authenticates with: OpenAI's, and the key
// headers of Anthropic and Azure OpenAI clients.
var credentialHeaders = []string{"Authorization", "X-Api-Key", "Api-Key"}

// Credential is a keyed digest of a client's credential headers; the credential itself is never
// kept.
type Credential [16]byte

// digest is what a Record keeps of an id: ids come from the upstream, so their length is not the
// Record's to bound.
type digest [16]byte

// Record binds ids to the credentials that created them, at most max ids: in two generations of
// max/2, the older dropped whole when the newer is full (the oldest bound forgotten first; a map
// that only grows keeps no room of ids deleted). Safe for concurrent use; its zero value is not
// usable (New).
type Record struct {
	key [32]byte // of the digests, random per Record

	mu       sync.Mutex
	half     int
	cur, old map[digest]Credential
}

// New returns an empty record of at most size ids; size <= 0 means DefaultMax.
func New(size int) *Record {
	if size <= 0 {
		size = DefaultMax
	}
	r := &Record{half: max(size/2, 1), cur: map[digest]Credential{}}
	_, _ = rand.Read(r.key[:]) // crypto/rand.Read never fails
	return r
}

// Credential is the credential of a request: its Authorization, X-Api-Key and Api-Key headers as
// the client sent them, every value in order. A request with none of them has the credential of
// every such request.
func (r *Record) Credential(h http.Header) Credential {
	m := hmac.New(sha256.New, r.key[:])
	for _, name := range credentialHeaders {
		m.Write([]byte(name))
		for _, v := range h.Values(name) {
			m.Write([]byte{0})
			m.Write([]byte(v))
		}
		m.Write([]byte{1})
	}
	var c Credential
	copy(c[:], m.Sum(nil))
	return c
}

// sum is the digest of an id.
func (r *Record) sum(id string) digest {
	m := hmac.New(sha256.New, r.key[:])
	m.Write([]byte(id))
	var d digest
	copy(d[:], m.Sum(nil))
	return d
}

// Bind records that c created id. An id already bound keeps its first credential: an answer cannot
// give a client another's object.
func (r *Record) Bind(id string, c Credential) {
	if id == "" {
		return
	}
	d := r.sum(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.lookup(d); ok {
		return
	}
	if len(r.cur) >= r.half {
		r.old, r.cur = r.cur, make(map[digest]Credential, r.half)
	}
	r.cur[d] = c
}

// lookup is the credential id d is bound to. The caller holds r.mu.
func (r *Record) lookup(d digest) (Credential, bool) {
	if c, ok := r.cur[d]; ok {
		return c, true
	}
	c, ok := r.old[d]
	return c, ok
}

// Owns reports whether id is bound to c: false for an id bound to another credential, and for one
// the record does not hold (bound elsewhere, before a restart, or forgotten), which may be
// another's as well.
func (r *Record) Owns(id string, c Credential) bool {
	d := r.sum(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	owner, ok := r.lookup(d)
	return ok && hmac.Equal(owner[:], c[:])
}

// Len is how many ids the record holds.
func (r *Record) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cur) + len(r.old)
}
