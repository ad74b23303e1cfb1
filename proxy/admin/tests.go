package admin

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/policy/jsoncheck"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/policytest"
)

// Paths of the policy tests, and the media types their bodies may have.
const (
	pathTests       = "/admin/tests"
	pathTestsRecord = "/admin/tests/record"
	mediaYAML       = "application/yaml"
	mediaJSON       = "application/json"
	// recordedBy is what a case recorded over the API says recorded it.
	recordedBy = "POST " + pathTestsRecord
	// maxRequestIDLen bounds the request id of POST /admin/tests/record (the proxy's own are far
	// shorter).
	maxRequestIDLen = 256
)

// caseReply is the verdict on one case of POST /admin/tests.
type caseReply struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	// Failures are the expectations not met; Mistakes the mistakes of the case found by running it.
	Failures []policytest.Problem `json:"failures"`
	Mistakes []policytest.Problem `json:"mistakes"`
	// Decided is what was decided, a line each (what `promptgate test -v` prints).
	Decided []string `json:"decided"`
	Seconds float64  `json:"seconds"`
}

// testsReply is the answer of POST /admin/tests.
type testsReply struct {
	Passed bool        `json:"passed"`
	Total  int         `json:"total"`
	Failed int         `json:"failed"`
	Cases  []caseReply `json:"cases"`
}

// caseFileError is the 400 of a case file with problems: the OpenAI error, with every problem as
// data.
type caseFileError struct {
	Error struct {
		Message  string               `json:"message"`
		Type     string               `json:"type"`
		Param    *string              `json:"param"`
		Code     string               `json:"code"`
		Problems []policytest.Problem `json:"problems"`
	} `json:"error"`
}

// POST /admin/tests[?run=REGEXP], body: one case file, as `promptgate test` reads it
// (application/yaml, or application/json) → the verdict on each case the filter matches, run
// against the store's definitions. A case file with problems, or one that names a file, is a 400
// listing every problem; nothing is run.
func (s *server) runTests(w http.ResponseWriter, r *http.Request) error {
	if s.o.Tests == nil {
		return &apiError{status: http.StatusNotFound, code: "not_found", msg: "policy tests are not enabled on this listener"}
	}
	q, err := params(r, "run")
	if err != nil {
		return err
	}
	var filter *regexp.Regexp
	if q.Has("run") {
		if filter, err = regexp.Compile(q.Get("run")); err != nil {
			return badRequest("invalid_request", "run", "run %q: not a regular expression (Go RE2 syntax): %v", q.Get("run"), err)
		}
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	if err := checkCaseFileBody(r, body); err != nil {
		return err
	}
	cases, problems := policytest.Parse("", "", body, policytest.Options{NoFiles: true})
	if len(problems) > 0 {
		return writeCaseFileError(w, problems)
	}
	cases = slices.DeleteFunc(cases, func(c *policytest.Case) bool { return filter != nil && !filter.MatchString(c.Name) })
	snap, err := s.o.Store.Snapshot(r.Context())
	if err != nil {
		return err
	}
	env := policytest.NewEnv(*s.o.Tests, snap)
	if problems := env.LoadProtocols(r.Context(), cases, s.o.Store); len(problems) > 0 {
		return writeCaseFileError(w, problems)
	}
	reply := testsReply{Passed: true, Total: len(cases), Cases: []caseReply{}}
	for _, c := range cases {
		if err := r.Context().Err(); err != nil {
			return err // the client went away: the cases left are not run
		}
		res, err := env.Run(r.Context(), c)
		if err != nil {
			return fmt.Errorf("admin: tests: %s: %w", c.Name, err)
		}
		if !res.Passed() {
			reply.Passed = false
			reply.Failed++
		}
		reply.Cases = append(reply.Cases, caseReply{Name: c.Name, Passed: res.Passed(), Failures: orEmpty(res.Failures),
			Mistakes: orEmpty(res.Problems), Decided: res.Details, Seconds: res.Took.Seconds()})
	}
	return writeJSON(w, http.StatusOK, reply)
}

// checkCaseFileBody refuses an empty body, and a JSON body that is not one strict JSON object.
func checkCaseFileBody(r *http.Request, body []byte) error {
	if len(strings.TrimSpace(string(body))) == 0 {
		return badRequest("invalid_request", "", "the body is empty: send one case file, as `promptgate test` reads it (Content-Type: %s, or %s)", mediaYAML, mediaJSON)
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != mediaJSON {
		return nil
	}
	if err := jsoncheck.Object(body, jsoncheck.Limits{MaxDepth: maxBodyDepth}); err != nil {
		var je *jsoncheck.Error
		if errors.As(err, &je) {
			return badRequest("invalid_json", "", "request body: %s (a case file in YAML goes with Content-Type: %s)", je.QuotedError(), mediaYAML)
		}
		return badRequest("invalid_json", "", "request body: %v (a case file in YAML goes with Content-Type: %s)", err, mediaYAML)
	}
	return nil
}

// writeCaseFileError answers 400 invalid_case_file: every problem, as "LINE: FIELD: MESSAGE" lines
// in the message and as data in problems.
func writeCaseFileError(w http.ResponseWriter, problems []policytest.Problem) error {
	var e caseFileError
	lines := make([]string, len(problems))
	for i, p := range problems {
		lines[i] = p.String()
	}
	e.Error.Message = fmt.Sprintf("the case file has %d problem(s); nothing was run:\n%s", len(problems), strings.Join(lines, "\n"))
	e.Error.Type, e.Error.Code, e.Error.Problems = "invalid_request_error", "invalid_case_file", problems
	return writeJSON(w, http.StatusBadRequest, e)
}

func orEmpty(p []policytest.Problem) []policytest.Problem {
	if p == nil {
		return []policytest.Problem{}
	}
	return p
}

// recordBody is the body of POST /admin/tests/record.
type recordBody struct {
	RequestID string  `json:"requestId"`
	Path      *string `json:"path"`
}

// recordReply is the answer of POST /admin/tests/record.
type recordReply struct {
	RequestID string `json:"requestId"`
	Path      string `json:"path"`
	// CaseFile is the case file, as `promptgate test --record` writes it.
	CaseFile string `json:"caseFile"`
}

// POST /admin/tests/record {"requestId":"...","path":"optional"} → {"requestId","path","caseFile"}:
// a case file written from what this server's audit ring kept of the request, as `promptgate test
// --record` writes it (path is the route the request came on, which the log does not keep; default
// chat completions).
func (s *server) recordTest(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	body, err := readBody(w, r)
	if err != nil {
		return err
	}
	var req recordBody
	if err := decodeStrict(body, &req, "requestId", "path"); err != nil {
		return err
	}
	if req.RequestID == "" {
		return badRequest("invalid_request", "requestId", `requestId: required: the X-Request-Id of the request whose decisions to record, e.g. {"requestId":"pg-..."}`)
	}
	if err := plainText(req.RequestID, maxRequestIDLen); err != nil {
		return badRequest("invalid_request", "requestId", "requestId: %v", err)
	}
	path := proxy.PathChat
	if req.Path != nil {
		if path = *req.Path; !proxy.PreviewPath(path) {
			return badRequest("invalid_request", "path", "path %q: the route the request came on, one of %s (default %s)",
				path, strings.Join(proxy.PreviewPaths(), ", "), proxy.PathChat)
		}
	}
	if s.o.Audit == nil {
		return &apiError{status: http.StatusNotFound, code: "not_found", msg: "this listener has no audit ring to record from"}
	}
	s.flushAudit(r.Context())
	events, err := s.o.Audit.Query(r.Context(), audit.Filter{RequestID: req.RequestID, Limit: audit.MaxQueryLimit})
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return &apiError{status: http.StatusNotFound, code: "not_found", param: "requestId",
			msg: fmt.Sprintf("no decision of request %q in the audit ring: is the id right (the X-Request-Id of the answer), and is the event still in the ring?", req.RequestID)}
	}
	slices.Reverse(events) // oldest first
	rec, err := policytest.NewRecording(req.RequestID, path, events)
	if err != nil {
		return &apiError{status: http.StatusConflict, code: "not_recordable", param: "requestId", msg: err.Error()}
	}
	text, err := rec.YAML(recordedBy, "the server's audit ring", time.Now().UTC())
	if err != nil {
		return fmt.Errorf("admin: record: %w", err)
	}
	return writeJSON(w, http.StatusOK, recordReply{RequestID: req.RequestID, Path: path, CaseFile: string(text)})
}

// bodyTypes are the media types a POST or PUT to path may send: JSON, and for a case file YAML too.
func bodyTypes(path string) []string {
	if path == pathTests {
		return []string{mediaYAML, mediaJSON}
	}
	return []string{mediaJSON}
}
