package responses

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy/surface"
)

var _ surface.Stored = (*Surface)(nil)

// bodyNamingPaths are the passed-through POST /v1/responses/{name} endpoints whose body may name a
// response (previous_response_id): not a response id in the path.
var bodyNamingPaths = []string{"input_tokens", "compact"}

// Names reads what a passed-through request names of the responses the upstream stores, under every
// reading of its path (surface.LoosePaths): any method but POST on /v1/responses lists them;
// /v1/responses/{id}[/...] names response id (retrieve, delete, cancel, input_items), except POST
// /v1/responses/input_tokens and /compact, whose body may name one.
func (*Surface) Names(r *http.Request) surface.Naming {
	var n surface.Naming
	prefix := Path + "/"
	for _, p := range surface.LoosePaths(r) {
		switch {
		case strings.EqualFold(p, Path):
			n.List = n.List || r.Method != http.MethodPost
		case len(p) > len(prefix) && strings.EqualFold(p[:len(prefix)], prefix):
			id, rest, _ := strings.Cut(p[len(prefix):], "/")
			if r.Method == http.MethodPost && rest == "" && bodyNaming(id) {
				n.Body = true
				continue
			}
			n.Names = append(n.Names, surface.Name{ID: id})
		}
	}
	return n
}

// bodyNaming reports whether POST /v1/responses/{name} is an endpoint whose body may name a
// response.
func bodyNaming(name string) bool {
	for _, p := range bodyNamingPaths {
		if strings.EqualFold(name, p) {
			return true
		}
	}
	return false
}

// BodyNames is the response a request body continues: previous_response_id, under every top-level
// key that a case-insensitive reader (Go's encoding/json, strings.EqualFold's folding) takes for
// it. A value that is not a string, or is empty, names none: no stored response has it.
func (*Surface) BodyNames(body []byte) []surface.Name {
	var out []surface.Name
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		if strings.EqualFold(k.Str, reqPreviousResponseID) && v.Type == gjson.String && v.Str != "" {
			out = append(out, surface.Name{ID: v.Str, Param: reqPreviousResponseID})
		}
		return true
	})
	return out
}

// NotFound answers as the API answers a response id it does not have: 404 for one in the path, 400
// previous_response_not_found for a continued one.
func (*Surface) NotFound(n surface.Name) (int, []byte) {
	if n.Param != "" {
		return http.StatusBadRequest, surface.ErrorParamJSON(fmt.Sprintf("Previous response with id '%s' not found.", surface.ClipID(n.ID)),
			"invalid_request_error", n.Param, "previous_response_not_found")
	}
	return http.StatusNotFound, surface.ErrorJSON(fmt.Sprintf("Response with id '%s' not found.", surface.ClipID(n.ID)), "invalid_request_error", "not_found")
}

// NoListing refuses a listing of responses while the upstream key is shared.
func (*Surface) NoListing() (int, []byte) {
	return http.StatusForbidden, surface.ErrorJSON(surface.NoListingMessage("responses"), "permission_error", surface.CodeListingNotAllowed)
}
