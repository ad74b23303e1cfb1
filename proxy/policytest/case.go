package policytest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"gopkg.in/yaml.v3"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/sse"
	"github.com/promptgate/promptgate/store"
)

// Suffixes are the endings of the names of case files (`promptgate test` reads no other file).
func Suffixes() []string { return []string{".test.yaml", ".test.yml"} }

// MaxFileBytes bounds a case file, and a file it names.
const MaxFileBytes = 10 << 20

// MaxCases bounds the cases of one file: each runs a proxy of its own.
const MaxCases = 5000

// MaxPatternInsts bounds the compiled program of one pattern (matches, notMatches): Go's regexp
// matches in time linear in the text, times the program's size.
const MaxPatternInsts = 1000

// programSize is the number of instructions of a pattern's compiled program (one that does not
// compile counts as none: regexp.Compile refuses it first).
func programSize(pattern string) int {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0
	}
	return len(prog.Inst)
}

// caseNamePattern is what a case's name may hold: it is a part of the name -run matches and CI
// shows.
var caseNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)

// Case is one policy test: a protocol, a request, the upstream's answers, and what must come of
// them.
type Case struct {
	File string // the case file, as found ("" for one sent to the admin API)
	Line int    // the line of the case in it
	// Field is where the case is in its file ("cases[2]"), the prefix of its problems' fields.
	Field string
	// Name is the full name: the file's name, "/", the case's name (the case's name alone in a file
	// without a name).
	Name string
	Note string
	// Protocol is the protocol the request runs under (the engine's default protocol).
	Protocol ProtocolRef
	// Path is the route the request is posted to.
	Path string
	// step is the case's request, its answers and expectations; then are the follow-ups (`then`),
	// each a later turn of the same conversation, run through the same proxy.
	step
	then []step
}

// step is one request of a case: its headers and body, the upstream's answers, and what must come
// of them.
type step struct {
	field   string // "cases[0]", or "cases[0].then[1]" for a follow-up
	line    int
	header  http.Header
	request []byte
	answers []answer
	expect  expectations
}

// steps are the case's requests in the order they run: its own, then the follow-ups.
func (c *Case) steps() []*step {
	out := []*step{&c.step}
	for i := range c.then {
		out = append(out, &c.then[i])
	}
	return out
}

// ProtocolRef names a protocol: by id (version 0: the active one) in the store, or by a definition
// file.
type ProtocolRef struct {
	ID      string
	Version int
	File    string // resolved against the case file's folder
	Field   string // where it was given
	Line    int
}

func (p ProtocolRef) String() string {
	switch {
	case p.File != "":
		return "file " + p.File
	case p.Version > 0:
		return p.ID + "@" + strconv.Itoa(p.Version)
	}
	return p.ID + " (the active version)"
}

// Problem is a mistake of a case file: where it is and what is wrong.
type Problem struct {
	File    string `json:"-"`
	Line    int    `json:"line,omitempty"`  // 0: the file as a whole
	Field   string `json:"field,omitempty"` // the key path, "cases[0].expect.calls[1].id"
	Message string `json:"message"`
}

// String is "FILE:LINE: FIELD: MESSAGE", the parts not known left out ("FILE: MESSAGE" for a file
// that cannot be read); without a file (a case file sent to the admin API) it starts at the line.
func (p Problem) String() string {
	loc := p.File
	if p.Line > 0 || p.Field != "" {
		if loc != "" {
			loc += ":"
		}
		loc += strconv.Itoa(p.Line)
	}
	var parts []string
	if loc != "" {
		parts = append(parts, loc)
	}
	if p.Field != "" {
		parts = append(parts, p.Field)
	}
	return strings.Join(append(parts, p.Message), ": ")
}

// answer is one answer of the upstream: a JSON body or an event stream, played to the proxy as it
// is.
type answer struct {
	field  string
	line   int
	status int
	header http.Header
	// chunks are the answer's bytes in the pieces the proxy reads them in (one per event of a
	// stream).
	chunks [][]byte
	stream bool
}

// bytes is the whole answer.
func (a answer) bytes() []byte { return bytes.Join(a.chunks, nil) }

// expectations are what a case checks; a nil list or an empty check is not checked.
type expectations struct {
	status       int    // 0: 200 unless errorCode is set
	errorCode    string // the code of the OpenAI-shaped error the client gets
	toolsKept    *fieldList
	toolsRemoved *fieldList
	prompt       textChecks
	client       textChecks
	// calls name every call of the answer; nil: calls are not checked.
	calls *[]callExpect
	// field and line are where expect is, for the checks that have no key of their own.
	field string
	line  int
}

// fieldList is a list of names and where it was given.
type fieldList struct {
	names []string
	field string
	line  int
}

// textChecks are checks on a text: substrings it must and must not hold, patterns it must and must
// not match.
type textChecks struct {
	contains, notContains []fieldText
	matches, notMatches   []fieldPattern
}

type fieldText struct {
	text, field string
	line        int
}

type fieldPattern struct {
	re *regexp.Regexp
	// insts is the size of the pattern's compiled program: what matching it costs per byte of text,
	// at most.
	insts int
	field string
	line  int
}

func (t textChecks) empty() bool {
	return len(t.contains)+len(t.notContains)+len(t.matches)+len(t.notMatches) == 0
}

// Outcomes of a call, as a case names them.
const (
	outcomeReleased  = "released"
	outcomeAudited   = "audited"
	outcomeBlocked   = "blocked"
	outcomeHeld      = "held"
	outcomeConfirmed = "confirmed"
)

// Outcomes are the outcomes a case may expect of a call.
func Outcomes() []string {
	return []string{outcomeReleased, outcomeAudited, outcomeBlocked, outcomeHeld, outcomeConfirmed}
}

// callExpect is what must come of one call: it is named by its id, or by its tool (the calls of one
// tool are taken in the order they were decided).
type callExpect struct {
	id, tool string
	outcome  string
	rule     *string // nil: not checked; "" checks that no rule decided it
	kind     string
	reason   string // a substring of the decision's reason
	// argsSHA256 is the hex SHA-256 of the call's arguments (a recorded call's, as the decision log
	// keeps it).
	argsSHA256 string
	field      string
	line       int
}

// Options say how a case file is read.
type Options struct {
	// NoFiles refuses every file a case names (a protocol's {file: PATH}, requestFile), each a
	// problem at its field: the admin API reads no file of the server's.
	NoFiles bool
}

// ReadFile reads and checks the case file path; name is the prefix of its cases' names. Every
// problem found is returned.
func ReadFile(path, name string) ([]*Case, []Problem) {
	src, err := readLimited(path)
	if err != nil {
		return nil, []Problem{{File: path, Message: err.Error()}}
	}
	return Parse(path, name, src, Options{})
}

// Parse reads the case file path, whose bytes are src; name is the prefix of its cases' names ("":
// none). Every problem found is returned, each naming the file, the line and the field.
func Parse(path, name string, src []byte, o Options) ([]*Case, []Problem) {
	r := &yamlReader{file: path, noFiles: o.NoFiles}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(src))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, []Problem{{File: path, Message: "the file is empty: give protocol and cases"}}
		}
		return nil, []Problem{{File: path, Message: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	var more yaml.Node
	if dec.Decode(&more) == nil {
		return nil, []Problem{{File: path, Line: more.Line, Message: "the file holds more than one YAML document: give one, with its cases in cases"}}
	}
	top := r.fields(doc.Content[0], "", "protocol", "path", "headers", "cases")
	if top == nil {
		return nil, r.errs
	}
	defaults := Case{File: path, Path: proxy.PathChat, step: step{header: http.Header{}}}
	if n := top["protocol"]; n != nil {
		defaults.Protocol = r.protocol(n, "protocol", filepath.Dir(path))
	}
	if n := top["path"]; n != nil {
		defaults.Path = r.path(n, "path")
	}
	if n := top["headers"]; n != nil {
		defaults.header = r.headers(n, "headers")
	}
	items, ok := []*yaml.Node(nil), false
	if top["cases"] == nil {
		r.bad(doc.Content[0], "cases", "missing: give the list of cases")
	} else if items, ok = r.list(top["cases"], "cases", "cases"); ok && len(items) == 0 {
		r.bad(top["cases"], "cases", "the list is empty")
	} else if len(items) > MaxCases {
		r.bad(top["cases"], "cases", "%d cases: a file holds at most %d (split it)", len(items), MaxCases)
		items = nil
	}
	var cases []*Case
	names := map[string]int{}
	for i, n := range items {
		c := r.testCase(n, fmt.Sprintf("cases[%d]", i), defaults)
		if c == nil {
			continue
		}
		if j, dup := names[c.Name]; dup {
			r.bad(n, c.Field+".name", "cases[%d] has the same name", j)
		}
		names[c.Name] = i
		if name != "" {
			c.Name = name + "/" + c.Name
		}
		cases = append(cases, c)
	}
	return cases, r.errs
}

// FileRef is a case file found, and the name its cases' names start with.
type FileRef struct{ Path, Name string }

// Load reads every case file, and keeps the cases filter matches (all of them when it is nil).
// Every problem of every file is returned: a bad file is bad whether or not its cases are run.
func Load(files []FileRef, filter *regexp.Regexp) ([]*Case, []Problem) {
	var cases []*Case
	var problems []Problem
	names := map[string]string{}
	for _, ref := range files {
		got, errs := ReadFile(ref.Path, ref.Name)
		problems = append(problems, errs...)
		for _, c := range got {
			if other, dup := names[c.Name]; dup {
				problems = append(problems, Problem{File: c.File, Line: c.Line, Field: c.Field + ".name",
					Message: fmt.Sprintf("the case %s of %s has the same full name", c.Name, other)})
			}
			names[c.Name] = c.File
			if filter == nil || filter.MatchString(c.Name) {
				cases = append(cases, c)
			}
		}
	}
	return cases, problems
}

// fromCaseFile is the path of a file a case file names: relative to the case file's folder dir.
func fromCaseFile(dir, name string) string {
	if filepath.IsAbs(name) {
		return filepath.Clean(name)
	}
	return filepath.Join(dir, filepath.FromSlash(name))
}

// readLimited reads a file of at most MaxFileBytes bytes.
func readLimited(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	return b, nil
}

// testCase reads the case n at field, over the file's defaults; nil when it has no usable name.
func (r *yamlReader) testCase(n *yaml.Node, field string, defaults Case) *Case {
	m := r.fields(n, field, "name", "note", "protocol", "path", "headers", "request", "requestFile", "answer", "answers", "expect", "then")
	if m == nil {
		return nil
	}
	c := defaults
	c.Field, c.Line = field, resolve(n).Line
	c.step.field, c.step.line = c.Field, c.Line
	c.header = defaults.header.Clone()
	dir := filepath.Dir(defaults.File)
	if m["name"] == nil {
		r.bad(n, field+".name", "missing: give the case a name (letters, digits, _ . -)")
		return nil
	}
	name, ok := r.str(m["name"], field+".name")
	if !ok {
		return nil
	}
	if !caseNamePattern.MatchString(name) {
		r.bad(m["name"], field+".name", "%q: use 1 to 100 letters, digits, _ . - (starting with a letter or digit)", name)
	}
	c.Name = name
	if v := m["note"]; v != nil {
		c.Note, _ = r.str(v, field+".note")
	}
	if v := m["protocol"]; v != nil {
		c.Protocol = r.protocol(v, field+".protocol", dir)
	}
	if c.Protocol.ID == "" && c.Protocol.File == "" && m["protocol"] == nil && defaults.Protocol.Field == "" {
		r.bad(n, field+".protocol", "missing: give the protocol here or at the top of the file (protocol: ID, ID@VERSION or {file: PATH})")
	}
	if v := m["path"]; v != nil {
		c.Path = r.path(v, field+".path")
	}
	if v := m["headers"]; v != nil {
		for k, vs := range r.headers(v, field+".headers") {
			c.header[k] = vs
		}
	}
	c.request = r.request(m["request"], m["requestFile"], n, field, dir)
	c.answers = r.answers(m["answer"], m["answers"], field)
	r.answerShapes(c.Path, c.answers)
	c.expect = r.expect(m["expect"], n, field+".expect")
	if v := m["then"]; v != nil {
		c.then = r.followUps(v, field+".then", &c, dir)
	}
	return &c
}

// answerShapes checks that each answer is of the API of path.
func (r *yamlReader) answerShapes(path string, answers []answer) {
	if !proxy.PreviewPath(path) {
		return // the path is the mistake, named already
	}
	for _, a := range answers {
		if err := checkAnswerShape(path, a); err != nil {
			r.errs = append(r.errs, Problem{File: r.file, Line: a.line, Field: a.field, Message: err.Error()})
		}
	}
}

// followUps reads then: the later turns of c's conversation, each a request (headers added to the
// case's), its answers and expectations. A follow-up's request and headers may hold {{code}} and
// {{notice}}: the code and the notice of the call held last before it.
func (r *yamlReader) followUps(n *yaml.Node, field string, c *Case, dir string) []step {
	items, ok := r.list(n, field, "follow-up steps ({request, answer, expect})")
	if ok && len(items) == 0 {
		r.bad(n, field, "the list is empty")
	}
	if len(items) > MaxFollowUps {
		r.bad(n, field, "%d steps: a case holds at most %d", len(items), MaxFollowUps)
		return nil
	}
	held := heldExpected(c.expect)
	var out []step
	for i, it := range items {
		sub := fmt.Sprintf("%s[%d]", field, i)
		m := r.fields(it, sub, "headers", "request", "requestFile", "answer", "answers", "expect")
		if m == nil {
			continue
		}
		s := step{field: sub, line: resolve(it).Line, header: c.header.Clone()}
		if v := m["headers"]; v != nil {
			h := r.headers(v, sub+".headers")
			for _, k := range slices.Sorted(maps.Keys(h)) {
				vs := h[k]
				s.header[k] = vs
				if strings.Contains(vs[0], fillNotice) {
					r.bad(v, sub+".headers."+k, "%s goes in the request only (a header carries %s)", fillNotice, fillCode)
				} else if hasFill(vs[0]) {
					r.needHeld(v, sub+".headers."+k, held)
				}
			}
		}
		s.request = r.request(m["request"], m["requestFile"], it, sub, dir)
		if hasFill(string(s.request)) {
			at, key := m["request"], ".request"
			if at == nil {
				at, key = m["requestFile"], ".requestFile"
			}
			r.needHeld(at, sub+key, held)
		}
		s.answers = r.answers(m["answer"], m["answers"], sub)
		r.answerShapes(c.Path, s.answers)
		s.expect = r.expect(m["expect"], it, sub+".expect")
		held = held || heldExpected(s.expect)
		out = append(out, s)
	}
	return out
}

// MaxFollowUps bounds the follow-up steps of one case.
const MaxFollowUps = 100

// needHeld is a problem at field, which holds {{code}} or {{notice}}, when no step before it
// expects a call to be held.
func (r *yamlReader) needHeld(n *yaml.Node, field string, held bool) {
	if !held {
		r.bad(n, field, "%s and %s are the code and the notice of the call held last before this step, and no step before it expects a held call (expect.calls with outcome: held)", fillCode, fillNotice)
	}
}

// heldExpected reports whether e expects a call to be held.
func heldExpected(e expectations) bool {
	if e.calls == nil {
		return false
	}
	return slices.ContainsFunc(*e.calls, func(c callExpect) bool { return c.outcome == outcomeHeld })
}

// protocol reads a protocol reference: "ID", "ID@VERSION", {id: ID, version: N} or {file: PATH}.
func (r *yamlReader) protocol(n *yaml.Node, field, dir string) ProtocolRef {
	ref := ProtocolRef{Field: field, Line: resolve(n).Line}
	if resolve(n).Kind == yaml.MappingNode {
		m := r.fields(n, field, "id", "version", "file")
		if m == nil {
			return ref
		}
		switch {
		case m["file"] != nil && (m["id"] != nil || m["version"] != nil):
			r.bad(n, field, "give file, or id (and version), not both")
		case m["file"] != nil:
			if f, ok := r.str(m["file"], field+".file"); ok && r.noFiles {
				r.bad(m["file"], field+".file", "the admin API reads no file: name a stored protocol (ID or ID@VERSION); push the file first with `promptgate protocols push`")
			} else if ok {
				ref.File = fromCaseFile(dir, f)
			}
		case m["id"] != nil:
			ref.ID, _ = r.str(m["id"], field+".id")
			if m["version"] != nil {
				if v, ok := r.integer(m["version"], field+".version"); ok && v < 1 {
					r.bad(m["version"], field+".version", "%d: versions count from 1", v)
				} else {
					ref.Version = v
				}
			}
		default:
			r.bad(n, field, "give id (and version) or file")
		}
	} else if s, ok := r.str(n, field); ok {
		ref.ID = s
		if id, v, found := strings.Cut(s, "@"); found {
			ref.ID = id
			version, err := strconv.Atoi(v)
			if err != nil || version < 1 {
				r.bad(n, field, "%q: the version after @ must be a number from 1", s)
			}
			ref.Version = version
		}
	}
	if ref.ID != "" && !store.ValidName(ref.ID) {
		r.bad(n, field, "%q is not a protocol id (1 to 64 of A-Z a-z 0-9 _ . -); a definition file goes in {file: PATH}", ref.ID)
	}
	return ref
}

// path reads the request's path: a rewritten route, with its query where its surface reads one.
func (r *yamlReader) path(n *yaml.Node, field string) string {
	p, ok := r.str(n, field)
	if ok && !proxy.PreviewPath(p) {
		r.bad(n, field, "%q is not a rewritten route: use one of %s", p, strings.Join(proxy.PreviewPaths(), ", "))
	}
	return p
}

// headers reads request headers: a mapping of names to strings.
func (r *yamlReader) headers(n *yaml.Node, field string) http.Header {
	h := http.Header{}
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		r.bad(n, field, "got %s, want a mapping of header names to values", kindName(n))
		return h
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		sub := joinField(field, k.Value)
		if !httpguts.ValidHeaderFieldName(k.Value) {
			r.bad(k, sub, "not a header name")
			continue
		}
		v, ok := r.str(n.Content[i+1], sub)
		if ok && !httpguts.ValidHeaderFieldValue(v) {
			r.bad(n.Content[i+1], sub, "the value holds a character a header cannot carry")
		}
		if h.Get(k.Value) != "" {
			r.bad(k, sub, "given twice")
		}
		h.Set(k.Value, v)
	}
	return h
}

// request reads the client's body: request (a mapping, or a string taken byte for byte) or
// requestFile (a path from the case file's folder).
func (r *yamlReader) request(inline, file, at *yaml.Node, field, dir string) []byte {
	switch {
	case inline != nil && file != nil:
		r.bad(at, field, "give request or requestFile, not both")
	case inline != nil:
		n := resolve(inline)
		if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
			if !r.spend(n, field+".request", len(n.Value)) {
				return nil
			}
			return []byte(n.Value) // a body the proxy must refuse is a case too
		}
		if n.Kind != yaml.MappingNode {
			r.bad(n, field+".request", "got %s, want the request body: a mapping, or JSON text in a string", kindName(n))
			return nil
		}
		b, _ := r.jsonValue(n, field+".request")
		return b
	case file != nil:
		name, ok := r.str(file, field+".requestFile")
		if !ok {
			return nil
		}
		if r.noFiles {
			r.bad(file, field+".requestFile", "the admin API reads no file: put the body in request")
			return nil
		}
		b, err := readLimited(fromCaseFile(dir, name))
		if err != nil {
			r.bad(file, field+".requestFile", "%v", err)
		}
		if !r.spend(file, field+".requestFile", len(b)) {
			return nil
		}
		return b
	default:
		r.bad(at, field+".request", "missing: give the client's request body (request, or requestFile)")
	}
	return nil
}

// answers reads answer (one) or answers (a list: the upstream's answer to each request promptgate
// sends it, in order; more than one where onViolation "continue" asks again).
func (r *yamlReader) answers(one, list *yaml.Node, field string) []answer {
	switch {
	case one != nil && list != nil:
		r.bad(one, field, "give answer or answers, not both")
	case one != nil:
		if a, ok := r.answer(one, field+".answer"); ok {
			return []answer{a}
		}
	case list != nil:
		items, ok := r.list(list, field+".answers", "answers")
		var out []answer
		for i, n := range items {
			if a, good := r.answer(n, fmt.Sprintf("%s.answers[%d]", field, i)); good {
				out = append(out, a)
			}
		}
		if ok && len(items) == 0 {
			r.bad(list, field+".answers", "the list is empty")
		}
		return out
	}
	return nil
}

// answer reads one answer: status, headers and one of body (JSON), events (a stream, event by
// event) or sse (a stream as captured, byte for byte).
func (r *yamlReader) answer(n *yaml.Node, field string) (answer, bool) {
	a := answer{field: field, line: resolve(n).Line, status: http.StatusOK, header: http.Header{}}
	m := r.fields(n, field, "status", "headers", "body", "events", "sse")
	if m == nil {
		return a, false
	}
	before := len(r.errs)
	if v := m["status"]; v != nil {
		if s, ok := r.integer(v, field+".status"); ok && (s < 200 || s > 599) {
			r.bad(v, field+".status", "%d: give an HTTP status from 200 to 599", s)
		} else {
			a.status = s
		}
	}
	if v := m["headers"]; v != nil {
		a.header = r.headers(v, field+".headers")
	}
	given := 0
	for _, k := range []string{"body", "events", "sse"} {
		if m[k] != nil {
			given++
		}
	}
	if given != 1 {
		r.bad(n, field, "give exactly one of body (a JSON answer), events (a stream, one item per event) or sse (a stream as captured)")
		return a, false
	}
	switch {
	case m["body"] != nil:
		b, ok := r.jsonValue(m["body"], field+".body")
		if ok && !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
			r.bad(m["body"], field+".body", "an answer's body is a JSON object")
		}
		a.chunks = [][]byte{b}
	case m["events"] != nil:
		a.stream = true
		a.chunks = r.events(m["events"], field+".events")
	default:
		a.stream = true
		if s, ok := r.str(m["sse"], field+".sse"); ok {
			a.chunks = [][]byte{[]byte(s)}
		}
	}
	if a.header.Get("Content-Type") == "" {
		a.header.Set("Content-Type", "application/json")
		if a.stream {
			a.header.Set("Content-Type", "text/event-stream")
		}
	}
	return a, len(r.errs) == before
}

// events reads a stream event by event: each item has data (a string as is, or a mapping written as
// JSON) and an optional event name. Each event is played to the proxy as a read of its own.
func (r *yamlReader) events(n *yaml.Node, field string) [][]byte {
	items, ok := r.list(n, field, "events ({data: ..., event: NAME})")
	if ok && len(items) == 0 {
		r.bad(n, field, "the list is empty")
	}
	var out [][]byte
	for i, it := range items {
		sub := fmt.Sprintf("%s[%d]", field, i)
		m := r.fields(it, sub, "event", "data")
		if m == nil {
			continue
		}
		name := ""
		if v := m["event"]; v != nil {
			if name, _ = r.str(v, sub+".event"); strings.ContainsAny(name, "\r\n") {
				r.bad(v, sub+".event", "an event name is one line")
			}
		}
		out = append(out, sse.AppendEvent(nil, name, []byte(r.eventData(m["data"], it, sub))))
	}
	return out
}

// eventData reads an event's data: a string as it is, or a mapping or list as compact JSON.
func (r *yamlReader) eventData(v, at *yaml.Node, field string) string {
	if v == nil {
		r.bad(at, field+".data", "missing: give the event's data")
		return ""
	}
	n := resolve(v)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		r.spend(n, field+".data", len(n.Value))
		return n.Value
	}
	if n.Kind == yaml.SequenceNode && len(n.Content) == 1 && resolve(n.Content[0]).Value == "DONE" {
		r.bad(n, field+".data", `[DONE] unquoted is a YAML list: write data: "[DONE]"`)
		return ""
	}
	b, _ := r.jsonValue(n, field+".data")
	return string(b)
}

// expect reads the expectations.
func (r *yamlReader) expect(n, at *yaml.Node, field string) expectations {
	e := expectations{field: field, line: resolve(at).Line}
	if n == nil {
		r.bad(at, field, "missing: say what must come of the request (status, error, toolsKept, toolsRemoved, prompt, client, calls)")
		return e
	}
	m := r.fields(n, field, "status", "error", "toolsKept", "toolsRemoved", "prompt", "client", "calls")
	if m == nil {
		return e
	}
	e.line = resolve(n).Line
	if len(m) == 0 {
		r.bad(n, field, "empty: give at least one check")
	}
	if v := m["status"]; v != nil {
		if s, ok := r.integer(v, field+".status"); ok && (s < 200 || s > 599) {
			r.bad(v, field+".status", "%d: give an HTTP status from 200 to 599", s)
		} else {
			e.status = s
		}
	}
	if v := m["error"]; v != nil {
		e.errorCode, _ = r.str(v, field+".error")
	}
	e.toolsKept = r.names(m["toolsKept"], field+".toolsKept")
	e.toolsRemoved = r.names(m["toolsRemoved"], field+".toolsRemoved")
	e.prompt = r.textChecks(m["prompt"], field+".prompt")
	e.client = r.textChecks(m["client"], field+".client")
	if v := m["calls"]; v != nil {
		calls := r.calls(v, field+".calls")
		e.calls = &calls
	}
	return e
}

// names reads a list of tool names; nil when not given.
func (r *yamlReader) names(n *yaml.Node, field string) *fieldList {
	if n == nil {
		return nil
	}
	names, _ := r.strs(n, field)
	return &fieldList{names: names, field: field, line: resolve(n).Line}
}

// textChecks reads contains, notContains (strings) and matches, notMatches (Go regular
// expressions).
func (r *yamlReader) textChecks(n *yaml.Node, field string) textChecks {
	var t textChecks
	if n == nil {
		return t
	}
	m := r.fields(n, field, "contains", "notContains", "matches", "notMatches")
	texts := func(key string) []fieldText {
		var out []fieldText
		if m[key] == nil {
			return nil
		}
		items, _ := r.list(m[key], field+"."+key, "strings")
		for i, it := range items {
			sub := fmt.Sprintf("%s.%s[%d]", field, key, i)
			if s, ok := r.str(it, sub); ok {
				if s == "" {
					r.bad(it, sub, "empty: every text holds the empty string")
				}
				out = append(out, fieldText{text: s, field: sub, line: resolve(it).Line})
			}
		}
		return out
	}
	patterns := func(key string) []fieldPattern {
		var out []fieldPattern
		for _, ft := range texts(key) {
			re, err := regexp.Compile(ft.text)
			if err != nil {
				r.errs = append(r.errs, Problem{File: r.file, Line: ft.line, Field: ft.field,
					Message: "not a regular expression (Go RE2 syntax): " + strings.TrimPrefix(err.Error(), "error parsing regexp: ")})
				continue
			}
			n := programSize(ft.text)
			if n > MaxPatternInsts {
				r.errs = append(r.errs, Problem{File: r.file, Line: ft.line, Field: ft.field,
					Message: fmt.Sprintf("a pattern of %d instructions: matching costs its size for every byte of the text; give one of at most %d (a shorter repetition, fewer alternatives)", n, MaxPatternInsts)})
				continue
			}
			out = append(out, fieldPattern{re: re, insts: n, field: ft.field, line: ft.line})
		}
		return out
	}
	t.contains, t.notContains = texts("contains"), texts("notContains")
	t.matches, t.notMatches = patterns("matches"), patterns("notMatches")
	return t
}

// calls reads the expected calls.
func (r *yamlReader) calls(n *yaml.Node, field string) []callExpect {
	items, _ := r.list(n, field, "calls ({tool or id, outcome, rule, kind, reason})")
	out := make([]callExpect, 0, len(items))
	ids := map[string]bool{}
	for i, it := range items {
		sub := fmt.Sprintf("%s[%d]", field, i)
		m := r.fields(it, sub, "id", "tool", "outcome", "rule", "kind", "reason", "argumentsSha256")
		if m == nil {
			continue
		}
		c := callExpect{field: sub, line: resolve(it).Line}
		if m["id"] == nil && m["tool"] == nil {
			r.bad(it, sub, "name the call: by its id in the answer (id), or by its tool (tool)")
		}
		if v := m["id"]; v != nil {
			if c.id, _ = r.str(v, sub+".id"); ids[c.id] {
				r.bad(v, sub+".id", "another expectation names this call")
			}
			ids[c.id] = true
		}
		if v := m["tool"]; v != nil {
			c.tool, _ = r.str(v, sub+".tool")
		}
		if m["outcome"] == nil {
			r.bad(it, sub+".outcome", "missing: give one of %s", strings.Join(Outcomes(), ", "))
		} else if o, ok := r.str(m["outcome"], sub+".outcome"); ok {
			if !slices.Contains(Outcomes(), o) {
				r.bad(m["outcome"], sub+".outcome", "%q: give one of %s", o, strings.Join(Outcomes(), ", "))
			}
			c.outcome = o
		}
		if v := m["rule"]; v != nil {
			s, _ := r.str(v, sub+".rule")
			c.rule = &s
		}
		if v := m["kind"]; v != nil {
			c.kind, _ = r.str(v, sub+".kind")
			if !slices.Contains(callKinds(), c.kind) {
				r.bad(v, sub+".kind", "%q: give one of %s", c.kind, strings.Join(callKinds(), ", "))
			}
		}
		if v := m["reason"]; v != nil {
			c.reason, _ = r.str(v, sub+".reason")
		}
		if v := m["argumentsSha256"]; v != nil {
			if c.argsSHA256, _ = r.str(v, sub+".argumentsSha256"); !sha256Hex.MatchString(c.argsSHA256) {
				r.bad(v, sub+".argumentsSha256", "want 64 lowercase hex digits (the decision log's argumentsSha256)")
			}
		}
		out = append(out, c)
	}
	return out
}

// sha256Hex is a SHA-256 in lowercase hex.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// callKinds are the kinds of decision a call can have (the decision log's kinds of call events).
func callKinds() []string {
	return []string{audit.KindToolCall, audit.KindProvenance, audit.KindFlow, audit.KindBudget, audit.KindConfirm}
}
