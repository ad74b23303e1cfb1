package proxy

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/policy"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/proxy/surface"
)

// apiError is an error answered in the OpenAI shape.
type apiError struct {
	Status  int
	Type    string
	Code    string
	Message string
	Param   string
}

// typeFor maps a status to the OpenAI error type.
func typeFor(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusRequestEntityTooLarge, status == http.StatusRequestTimeout:
		return "invalid_request_error"
	case status >= 500:
		return "api_error"
	}
	return "invalid_request_error"
}

// toAPIError is the one place where errors of every stage become what the client sees.
func toAPIError(err error) apiError {
	var pe *policy.Error
	var je *jsoncheck.Error
	var mbe *http.MaxBytesError
	var ce *contextError
	var te *templateError
	switch {
	case errors.As(err, &pe):
		return apiError{Status: refusalStatus(pe.Code), Code: pe.Code, Message: pe.Message, Param: contractParam(pe.Code, pe.Param)}
	case errors.As(err, &je):
		// The client sees the key of its own body; the log (fail) gets only err, which never quotes
		// it.
		return apiError{Status: http.StatusBadRequest, Code: "invalid_json", Message: "request body: " + je.QuotedError()}
	case errors.As(err, &mbe):
		return apiError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: "request body is larger than the configured limit"}
	case errors.As(err, &ce):
		return apiError{Status: http.StatusServiceUnavailable, Code: "context_unavailable", Message: "a required context source failed: " + ce.err.Error()}
	case errors.As(err, &te):
		return apiError{Status: http.StatusInternalServerError, Code: "template_unavailable", Message: "the protocol's template is not available: " + te.err.Error()}
	case errors.Is(err, errBodyTimeout):
		return apiError{Status: http.StatusRequestTimeout, Code: "request_timeout", Message: "the request body did not arrive within limits.bodyReadTimeout"}
	case errors.Is(err, surface.ErrUpstreamTimeout):
		return apiError{Status: http.StatusGatewayTimeout, Code: "upstream_timeout", Message: "the upstream did not answer in time"}
	case errors.Is(err, surface.ErrUpstreamMalformed):
		return apiError{Status: http.StatusBadGateway, Code: "upstream_error", Message: err.Error()}
	}
	return apiError{Status: http.StatusInternalServerError, Code: "internal_error", Message: "internal error"}
}

// refusalStatus is the HTTP status of a policy refusal by its code: 403 where the client may not do
// what it asks, else 400 (the request itself is wrong).
func refusalStatus(code string) int {
	if code == policy.CodeProtocolNotAllowed {
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

// contractParam is the param of an error with the given code: the codes of the contract's error
// table (tool_choice_not_allowed among them) answer "param": null exactly as the contract shows,
// their message naming the field; other codes (invalid_request) keep the field's path.
func contractParam(code, param string) string {
	switch code {
	case "invalid_json", "unknown_protocol", "tool_choice_not_allowed", "protocol_not_allowed", "tool_call_blocked",
		"body_too_large", "upstream_error", "upstream_timeout", "context_unavailable", "upstream_stream_truncated":
		return ""
	}
	return param
}

// errorBody renders the OpenAI error JSON.
func errorBody(e apiError) []byte {
	if e.Type == "" {
		e.Type = typeFor(e.Status)
	}
	b := make([]byte, 0, 128+len(e.Message))
	b = append(b, `{"error":{"message":`...)
	b = append(b, assembly.JSONString(e.Message)...)
	b = append(b, `,"type":`...)
	b = append(b, assembly.JSONString(e.Type)...)
	b = append(b, `,"param":`...)
	if e.Param == "" {
		b = append(b, "null"...)
	} else {
		b = append(b, assembly.JSONString(e.Param)...)
	}
	b = append(b, `,"code":`...)
	b = append(b, assembly.JSONString(e.Code)...)
	b = append(b, "}}"...)
	return b
}

// writeError answers with the OpenAI error JSON. A 408 closes the connection: what is left of the
// request on the wire must not be read as the next one.
func writeError(w http.ResponseWriter, e apiError) {
	body := errorBody(e)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	if e.Status == http.StatusRequestTimeout {
		h.Set("Connection", "close")
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}

// fail logs and answers an error of any stage.
func fail(w http.ResponseWriter, log *slog.Logger, err error) {
	e := toAPIError(err)
	if e.Status >= 500 {
		log.Error("request failed", "status", e.Status, "code", e.Code, "err", err)
	} else {
		log.Info("request refused", "status", e.Status, "code", e.Code, "err", err)
	}
	writeError(w, e)
}
