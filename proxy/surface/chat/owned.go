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

// Names reads what a passed-through request names of the completions the upstream stores (store: true):
// GET (or any method but POST) of /v1/chat/completions lists them; /v1/chat/completions/{id}[/messages]
// names completion id (retrieve, update, delete, its messages).
func (Surface) Names(r *http.Request) surface.Naming {
	p := surface.LoosePath(r)
	if strings.EqualFold(p, Path) {
		return surface.Naming{List: r.Method != http.MethodPost}
	}
	prefix := Path + "/"
	if len(p) <= len(prefix) || !strings.EqualFold(p[:len(prefix)], prefix) {
		return surface.Naming{}
	}
	id, _, _ := strings.Cut(p[len(prefix):], "/")
	return surface.Naming{Name: surface.Name{ID: id}}
}

// BodyNames is nil: a chat request names no stored completion.
func (Surface) BodyNames([]byte) []surface.Name { return nil }

// NotFound answers as the API answers a stored completion id it does not have.
func (Surface) NotFound(n surface.Name) (int, []byte) {
	id := n.ID
	if len(id) > 128 {
		id = id[:128] + "…"
	}
	return http.StatusNotFound, surface.ErrorJSON(fmt.Sprintf("Chat completion with id '%s' not found.", id), "invalid_request_error", "not_found")
}

// NoListing refuses a listing of stored completions while the upstream key is shared.
func (Surface) NoListing() (int, []byte) {
	return http.StatusForbidden, surface.ErrorJSON(surface.NoListingMessage("chat completions"), "permission_error", surface.CodeListingNotAllowed)
}

// stored is the response side of a request the upstream stores (store: true) under a shared key: each
// round's completion id is bound to the client (created) before the client can learn it.
func stored(st surface.Start, several bool) surface.Exchange {
	created := st.Created
	vetBody := func(b []byte, c *vet.Checker, rec relay.Recorder) ([]byte, relay.Result, error) {
		if id := gjson.GetBytes(b, pathID); id.Type == gjson.String {
			created(id.Str)
		}
		return Body(b, c, rec)
	}
	return surface.Stateless{VetBody: vetBody, Join: join, VetStream: func(up io.ReadCloser, v surface.Vetting) io.ReadCloser {
		s := newStream(up, v, several)
		s.OnID = created
		return s
	}}
}
