package proxy

import "net/http"

// WriteError answers with the OpenAI error JSON {"error":{"message","type","param","code"}}; the
// type follows the status (401 authentication_error, 403 permission_error, 404 not_found_error, 5xx
// api_error, else invalid_request_error) and an empty param is null. The admin listener answers its
// errors with it.
func WriteError(w http.ResponseWriter, status int, code, msg, param string) {
	writeError(w, apiError{Status: status, Code: code, Message: msg, Param: param})
}

// APIError maps an error of any pipeline stage (as returned by Engine.PrepareChat or
// Engine.Preview) to the status and the OpenAI error body that the proxy listener would answer
// with.
func APIError(err error) (status int, body []byte) {
	e := toAPIError(err)
	return e.Status, errorBody(e)
}
