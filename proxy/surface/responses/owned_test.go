package responses

import (
	"encoding/json"
	"slices"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy/surface"
)

// FuzzBodyNamesAgreeWithEncodingJSON: the response a body continues, as Go's encoding/json reads it
// into a struct (case-insensitive keys, the last match winning) — the most permissive reader an
// upstream may use — is among those BodyNames reads, so that the check of who owns it holds
// whichever reader acts on it.
func FuzzBodyNamesAgreeWithEncodingJSON(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","previous_response_id":"resp_1"}`,
		`{"Previous_Response_ID":"resp_1"}`,
		`{"previous_reſponse_id":"resp_1"}`,
		`{"PREVIOUS_RESPONSE_ID":"resp_1","previous_response_id":"resp_2"}`,
		`{"previous\u005fresponse_id":"resp_1"}`,
		`{"previous_response_id":null}`,
		`{"previous_response_id":7}`,
		`{"previous_response_id":"resp_\u0031"}`,
		`{"input":[{"previous_response_id":"resp_1"}]}`,
	} {
		f.Add([]byte(seed))
	}
	var s Surface
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) || !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
			return // the proxy refuses such a body before it is read
		}
		var req struct {
			PreviousResponseID *string `json:"previous_response_id"`
		}
		if json.Unmarshal(body, &req) != nil || req.PreviousResponseID == nil || *req.PreviousResponseID == "" {
			return
		}
		want := surface.Name{ID: *req.PreviousResponseID, Param: reqPreviousResponseID}
		if got := s.BodyNames(body); !slices.Contains(got, want) {
			t.Fatalf("encoding/json reads previous_response_id %q, BodyNames %v", want.ID, got)
		}
	})
}
