package proxy

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"

	"github.com/promptgate/promptgate/proxy/owners"
	"github.com/promptgate/promptgate/proxy/surface"
)

// With a shared upstream key (an operator key of Options.Upstreams), every client reaches the
// upstream as the operator: the upstream stores every client's responses and completions under one
// account, and would hand any of them to any client that names its id. So, where the key goes with
// a request, the objects the upstream stores from the answer are bound to the client's credential
// (Options.Owners), and a request that names one of another credential, or one this instance does
// not know (it cannot tell a forgotten id from another's), is answered as the upstream answers an
// id that does not exist, before anything goes upstream; a listing of them is refused. Without a
// shared key, the upstream checks the client's own key, and nothing is bound or refused.

// bindsCreated is, for a rewritten request that goes with a shared key, the binding of what its
// answer has the upstream store to the client's credential (surface.Start.Created); nil otherwise.
func (s *Server) bindsCreated(r *http.Request, sf surface.Surface) (func(id string), owners.Credential, bool) {
	up := s.upstreams[sf.Upstream()]
	if _, ok := sf.(surface.Stored); !ok || up == nil || !up.keySent {
		return nil, owners.Credential{}, false
	}
	cred := s.owners.Credential(r.Header)
	return func(id string) { s.owners.Bind(id, cred) }, cred, true
}

// refuseForeign answers, and returns true for, a request that names a stored object not bound to
// cred.
func (s *Server) refuseForeign(w http.ResponseWriter, log *slog.Logger, st surface.Stored, names []surface.Name, cred owners.Credential) bool {
	for _, n := range names {
		if s.owners.Owns(n.ID, cred) {
			continue
		}
		log.Info("refused a request naming a stored object this client did not create through this instance",
			"id", n.ID, "param", n.Param)
		status, body := st.NotFound(n)
		writeJSON(w, status, body)
		return true
	}
	return false
}

// refusePassedForeign answers, and returns true for, a passed-through request that goes with a
// shared key and names a stored object not bound to the client's credential (in its path or its
// body), or lists them. A body that may name one is read whole (limits.maxBodyBytes) and sent on as
// read.
func (s *Server) refusePassedForeign(w http.ResponseWriter, r *http.Request) bool {
	up := inflightOf(r.Context()).up
	if up == nil || !up.keySent {
		return false
	}
	log := requestLogger(s.log, inflightOf(r.Context()).id)
	for _, sf := range s.opt.Engine.surfaces {
		st, ok := sf.(surface.Stored)
		if !ok {
			continue
		}
		n := st.Names(r)
		if n.List {
			log.Info("refused a listing of stored objects: the upstream key is shared", "path", r.URL.Path)
			status, body := st.NoListing()
			writeJSON(w, status, body)
			return true
		}
		if len(n.Names) > 0 && s.refuseForeign(w, log, st, n.Names, s.owners.Credential(r.Header)) {
			return true
		}
		if n.Body {
			body, err := readBody(w, r, s.limits.MaxBodyBytes)
			if err != nil {
				if r.Context().Err() != nil && !errors.Is(err, errBodyTimeout) {
					return true
				}
				fail(w, log, err)
				return true
			}
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
			if s.refuseForeign(w, log, st, st.BodyNames(body), s.owners.Credential(r.Header)) {
				return true
			}
		}
	}
	return false
}
