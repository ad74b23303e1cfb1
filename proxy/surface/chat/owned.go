package chat

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
	"github.com/promptgate/promptgate/proxy/surface"
)

var _ surface.Stored = Surface{}

// Names reads what a passed-through request names of the completions the upstream stores (store:
// true), under every reading of its path (surface.LoosePaths): any method but POST on
// /v1/chat/completions lists them; /v1/chat/completions/{id}[/messages] names completion id
// (retrieve, update, delete, its messages).
func (Surface) Names(r *http.Request) surface.Naming {
	var n surface.Naming
	prefix := Path + "/"
	for _, p := range surface.LoosePaths(r) {
		switch {
		case strings.EqualFold(p, Path):
			n.List = n.List || r.Method != http.MethodPost
		case len(p) > len(prefix) && strings.EqualFold(p[:len(prefix)], prefix):
			id, _, _ := strings.Cut(p[len(prefix):], "/")
			n.Names = append(n.Names, surface.Name{ID: id})
		}
	}
	return n
}

// BodyNames is nil: a chat request names no stored completion.
func (Surface) BodyNames([]byte) []surface.Name { return nil }

// NotFound answers as the API answers a stored completion id it does not have.
func (Surface) NotFound(n surface.Name) (int, []byte) {
	return http.StatusNotFound, surface.ErrorJSON(fmt.Sprintf("Chat completion with id '%s' not found.", surface.ClipID(n.ID)), "invalid_request_error", "not_found")
}

// NoListing refuses a listing of stored completions while the upstream key is shared.
func (Surface) NoListing() (int, []byte) {
	return http.StatusForbidden, surface.ErrorJSON(surface.NoListingMessage("chat completions"), "permission_error", surface.CodeListingNotAllowed)
}

// storedExchange is the response side of a request the upstream stores (store: true): each round's
// completion id is remembered with what was released of it (see stored.go), and bound to the client
// (Start.Created, under a shared key) before the client can learn it.
type storedExchange struct {
	surface.Stateless
	mem     *storedMemory
	system  []string
	created func(string)
	id      string // the round's completion id, as the answer's first bytes give it
}

func (s Surface) storedExchange(st surface.Start, several bool) *storedExchange {
	x := &storedExchange{mem: s.stored, system: clientSystem(st.Client), created: st.Created}
	vetBody := func(b []byte, c *vet.Checker, rec relay.Recorder) ([]byte, relay.Result, error) {
		if id := gjson.GetBytes(b, pathID); id.Type == gjson.String {
			x.onID(id.Str)
		}
		return Body(b, c, rec)
	}
	x.Stateless = surface.Stateless{VetBody: vetBody, Join: join, VetStream: func(up io.ReadCloser, v surface.Vetting) io.ReadCloser {
		st := newStream(up, v, several)
		st.OnID = x.onID
		return st
	}}
	return x
}

// onID starts a round's completion.
func (x *storedExchange) onID(id string) {
	x.id = id
	x.mem.begin(id, x.system)
	if x.created != nil {
		x.created(id)
	}
}

// Decided remembers a decision on a call of the round's completion.
func (x *storedExchange) Decided(d vet.Decision) { x.mem.decided(x.id, d) }
