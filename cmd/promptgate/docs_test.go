package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy/demo"
)

// The documentation's pages: README.md and docs/*.md. The tests in docs_*_test.go run or validate
// every example of a page; the helpers here read a page, its sections, code blocks and shell
// commands.

// docPage is the text of a page of the repository, by its path from the repository's root.
func docPage(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(inRepo(page))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// heading is a Markdown heading line: its level (number of #) and its title.
var heading = regexp.MustCompile(`(?m)^(#{1,6}) (.+)$`)

// docSection is the text under the heading "## title" (or "### title", any level) of page, up to
// the next heading of the same or a higher level. Fenced blocks are skipped when looking for
// headings.
func docSection(t *testing.T, page, title string) string {
	t.Helper()
	s := docPage(t, page)
	hs := headings(s)
	for i, h := range hs {
		if h.title != title {
			continue
		}
		end := len(s)
		for _, n := range hs[i+1:] {
			if n.level <= h.level {
				end = n.start
				break
			}
		}
		return s[h.end:end]
	}
	t.Fatalf("%s has no section %q", page, title)
	return ""
}

// docHeading is one heading of a page: where its line starts and ends, its level and title.
type docHeading struct {
	start, end, level int
	title             string
}

// headings are the headings of a Markdown text outside fenced blocks.
func headings(s string) []docHeading {
	var out []docHeading
	fenced := fencedRanges(s)
	for _, m := range heading.FindAllStringSubmatchIndex(s, -1) {
		if inRanges(fenced, m[0]) {
			continue
		}
		out = append(out, docHeading{m[0], m[1], m[3] - m[2], s[m[4]:m[5]]})
	}
	return out
}

// fence is a fenced code block: its language and text. The closing fence is at the opening one's
// indent.
var fence = regexp.MustCompile("(?ms)^( *)```([a-z]*)\n(.*?)^ *```$")

// codeBlock is a fenced block of a page: its language and its text (indent removed).
type codeBlock struct{ lang, text string }

func codeBlocks(section string) []codeBlock {
	var out []codeBlock
	for _, m := range fence.FindAllStringSubmatch(section, -1) {
		text := m[3]
		if ind := m[1]; ind != "" {
			text = strings.ReplaceAll("\n"+text, "\n"+ind, "\n")[1:]
		}
		out = append(out, codeBlock{m[2], text})
	}
	return out
}

func fencedRanges(s string) [][2]int {
	var out [][2]int
	for _, m := range fence.FindAllStringIndex(s, -1) {
		out = append(out, [2]int{m[0], m[1]})
	}
	return out
}

func inRanges(rs [][2]int, i int) bool {
	for _, r := range rs {
		if i >= r[0] && i < r[1] {
			return true
		}
	}
	return false
}

// blocksOf are the code blocks of a section with the given language.
func blocksOf(section, lang string) []string {
	var out []string
	for _, b := range codeBlocks(section) {
		if b.lang == lang {
			out = append(out, b.text)
		}
	}
	return out
}

// anchor is the id GitHub gives a heading: lower case, punctuation other than - and _ dropped,
// spaces as -.
func anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// docPages are the pages whose links are checked: every Markdown file of the documentation.
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md", "SECURITY.md", "examples/README.md"}
	more, err := filepath.Glob(inRepo("docs/*.md"))
	if err != nil || len(more) < 8 {
		t.Fatalf("docs/: %v %v", more, err)
	}
	for _, p := range more {
		pages = append(pages, "docs/"+filepath.Base(p))
	}
	return pages
}

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinksResolve: every relative link of every page names a file or folder that exists and,
// with a
// #fragment, a heading of that page.
func TestDocsLinksResolve(t *testing.T) {
	t.Parallel()
	anchors := map[string][]string{}
	anchorsOf := func(page string) []string {
		if a, ok := anchors[page]; ok {
			return a
		}
		var a []string
		for _, h := range headings(docPage(t, page)) {
			a = append(a, anchor(h.title))
		}
		anchors[page] = a
		return a
	}
	for _, page := range docPages(t) {
		text := docPage(t, page)
		fenced := fencedRanges(text)
		for _, m := range mdLink.FindAllStringSubmatchIndex(text, -1) {
			link := text[m[2]:m[3]]
			if inRanges(fenced, m[0]) || strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(link, "#")
			target := page
			if file != "" {
				target = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
				if _, err := os.Stat(inRepo(target)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", page, link, target)
					continue
				}
			}
			if frag != "" && (!strings.HasSuffix(target, ".md") || !slices.Contains(anchorsOf(target), frag)) {
				t.Errorf("%s: link %q: %s has no heading #%s", page, link, target, frag)
			}
		}
	}
}

// TestAnchorIsGitHubs: the anchors the link test expects are the ones GitHub makes of this
// project's headings.
func TestAnchorIsGitHubs(t *testing.T) {
	t.Parallel()
	for title, want := range map[string]string{
		"The HTTPS-proxy door (`HTTPS_PROXY=`)":      "the-https-proxy-door-https_proxy",
		"Vetting the model's tool calls":             "vetting-the-models-tool-calls",
		"Continue mode: `onViolation: \"continue\"`": "continue-mode-onviolation-continue",
		"The config file (`--config`)":               "the-config-file---config",
		"Google's Gemini API":                        "googles-gemini-api",
	} {
		if got := anchor(title); got != want {
			t.Errorf("anchor(%q) = %q, want %q", title, got, want)
		}
	}
}

// shellCmd is one command of a shell block as a POSIX shell reads it: its pipeline's stages of
// words, its redirections (the word after > or <), and the text of its here-document.
type shellCmd struct {
	stages  [][]string
	redirs  []string
	heredoc string
}

// words are the command's first stage.
func (c shellCmd) words() []string { return c.stages[0] }

// docShell splits a shell block of the documentation into commands. It reads what a POSIX shell
// reads in the forms the pages use: words, '...' and "..." (both taken as written: the pages put no
// expansion in double quotes that the tests must see), a backslash before a line break, # comments,
// |, && and ;, > FILE, < FILE and <<'TAG' here-documents. Anything else (backquotes, $(...),
// parentheses) is an error, so a page cannot show a command these tests do not read.
func docShell(block string) ([]shellCmd, error) {
	var cmds []shellCmd
	var cur shellCmd
	var stage []string
	var word strings.Builder
	inWord, redirect := false, false
	var heredocTag string
	endWord := func() {
		if !inWord {
			return
		}
		w := word.String()
		word.Reset()
		inWord = false
		if redirect {
			cur.redirs = append(cur.redirs, w)
			redirect = false
			return
		}
		stage = append(stage, w)
	}
	endStage := func() error {
		endWord()
		if len(stage) == 0 {
			return errors.New("an empty command")
		}
		cur.stages = append(cur.stages, stage)
		stage = nil
		return nil
	}
	endCmd := func() error {
		endWord()
		if len(stage) == 0 && len(cur.stages) == 0 {
			return nil
		}
		if err := endStage(); err != nil {
			return err
		}
		cmds = append(cmds, cur)
		cur = shellCmd{}
		return nil
	}
	s := block
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote at offset %d", i)
			}
			word.WriteString(s[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '\\' && i+1 < len(s) && s[i+1] == '\n':
			endWord()
			i++
		case c == '\n':
			if heredocTag != "" {
				end := strings.Index(s[i+1:], "\n"+heredocTag+"\n")
				if end < 0 && strings.HasPrefix(s[i+1:], heredocTag+"\n") {
					end = -1
				} else if end < 0 {
					return nil, fmt.Errorf("here-document %s does not end", heredocTag)
				}
				body := ""
				if end >= 0 {
					body = s[i+1:i+1+end] + "\n"
				}
				cur.heredoc = body
				i += 1 + len(body) + len(heredocTag)
				heredocTag = ""
			}
			if err := endCmd(); err != nil {
				return nil, err
			}
		case c == ' ' || c == '\t':
			endWord()
		case c == '#' && !inWord:
			for i+1 < len(s) && s[i+1] != '\n' {
				i++
			}
		case c == '|' || c == ';' || (c == '&' && i+1 < len(s) && s[i+1] == '&'):
			if c == '&' {
				i++
			}
			if c == '|' {
				if err := endStage(); err != nil {
					return nil, err
				}
				continue
			}
			if err := endCmd(); err != nil {
				return nil, err
			}
		case c == '<' && strings.HasPrefix(s[i:], "<<'"):
			j := strings.IndexByte(s[i+3:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("here-document tag at offset %d", i)
			}
			endWord()
			heredocTag = s[i+3 : i+3+j]
			i += 3 + j
		case c == '>' || c == '<':
			endWord()
			redirect = true
		case strings.IndexByte("`()", c) >= 0 || (c == '$' && i+1 < len(s) && s[i+1] == '('):
			return nil, fmt.Errorf("a shell would read %q at offset %d specially", c, i)
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if err := endCmd(); err != nil {
		return nil, err
	}
	return cmds, nil
}

// mustShell is docShell of a block that the test expects to read.
func mustShell(t *testing.T, block string) []shellCmd {
	t.Helper()
	cmds, err := docShell(block)
	if err != nil {
		t.Fatalf("%v:\n%s", err, block)
	}
	return cmds
}

// cliArgs are the arguments of a promptgate command of the documentation (`promptgate ...` or `go
// run ./cmd/promptgate ...`), with every argument that names a file of the repository made
// absolute; ok is false for another command.
func cliArgs(words []string) ([]string, bool) {
	var args []string
	switch {
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/promptgate":
		args = words[3:]
	case len(words) >= 1 && words[0] == "promptgate":
		args = words[1:]
	default:
		return nil, false
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if !strings.HasPrefix(a, "-") && strings.Contains(a, "/") {
			if _, err := os.Stat(inRepo(a)); err == nil {
				out[i] = inRepo(a)
			}
		}
	}
	return out, true
}

// docCurl is the request of a curl command of the documentation, sent to proxy (for 127.0.0.1:8787
// and localhost:8787) or admin (for port 8788) instead. It knows the flags the pages use: -s, -i,
// -N, -X METHOD, -H 'K: V', -d DATA and -d @FILE (from the repository's root, line breaks removed
// as curl does); any other fails the test.
func docCurl(t *testing.T, words []string, proxy, admin string) *http.Request {
	t.Helper()
	if len(words) == 0 || words[0] != "curl" {
		t.Fatalf("not a curl command: %q", words)
	}
	var url, body, method string
	var headers []string
	hasBody := false
	for i := 1; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "-H" && i+1 < len(words):
			headers = append(headers, words[i+1])
			i++
		case w == "-X" && i+1 < len(words):
			method = words[i+1]
			i++
		case w == "-d" && i+1 < len(words):
			body, hasBody = words[i+1], true
			if file, ok := strings.CutPrefix(body, "@"); ok {
				b, err := os.ReadFile(inRepo(file))
				if err != nil {
					t.Fatal(err)
				}
				body = strings.NewReplacer("\r", "", "\n", "").Replace(string(b))
			}
			i++
		case regexp.MustCompile(`^-[siN]+$`).MatchString(w):
		case url == "" && !strings.HasPrefix(w, "-"):
			url = w
		default:
			t.Fatalf("curl word %q is not one the documentation's tests read", w)
		}
	}
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	url = strings.NewReplacer("127.0.0.1:8787", proxy, "localhost:8787", proxy, "127.0.0.1:8788", admin, "localhost:8788", admin).Replace(url)
	if method == "" {
		method = http.MethodGet
		if hasBody {
			method = http.MethodPost
		}
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if hasBody {
		// curl's own default for -d, which the listener refuses for a JSON API (415): pages must
		// say Content-Type, and this test sees when one does not.
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, h := range headers {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			t.Fatalf("header %q", h)
		}
		req.Header.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	return req
}

// jq applies a jq command of the pages (`jq PATH`, `jq -r PATH`, PATH of .names and [N]) to a JSON
// text: the value as jq prints it (-r: a string without its quotes).
func jq(t *testing.T, words []string, in string) string {
	t.Helper()
	raw := len(words) == 3 && words[1] == "-r"
	if len(words) != 2 && !raw || words[0] != "jq" {
		t.Fatalf("jq command %q is not one the documentation's tests read", words)
	}
	path := words[len(words)-1]
	if !regexp.MustCompile(`^(\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]+\])+$`).MatchString(path) {
		t.Fatalf("jq path %q is not one the documentation's tests read", path)
	}
	g := strings.TrimPrefix(regexp.MustCompile(`\[([0-9]+)\]`).ReplaceAllString(path, ".$1"), ".")
	v := gjson.Get(in, g)
	if !v.Exists() {
		return "null"
	}
	if raw && v.Type == gjson.String {
		return v.String()
	}
	return v.Raw
}

// respBody sends req and returns its status, headers and body.
func respBody(t *testing.T, req *http.Request) (int, http.Header, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// flagsOf are the flags a command takes, as its -h lists them (`promptgate CMD [SUB] -h`).
func flagsOf(t *testing.T, cmd ...string) []string {
	t.Helper()
	_, errOut, _ := runCmd(t, nil, "", append(cmd, "-h")...)
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^\s+-([a-z][a-z-]*)`).FindAllStringSubmatch(errOut, -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatalf("promptgate %s -h lists no flags:\n%s", strings.Join(cmd, " "), errOut)
	}
	return out
}

// checkCLIWords fails when a promptgate command of a page names a command or a flag promptgate does
// not have.
func checkCLIWords(t *testing.T, page string, args []string) {
	t.Helper()
	if len(args) == 0 {
		t.Errorf("%s: promptgate without a command", page)
		return
	}
	cmd := []string{args[0]}
	if slices.Contains([]string{"templates", "protocols", "migrate", "ca", "store", "policy"}, args[0]) {
		if len(args) == 1 {
			return // the command named as a whole
		}
		cmd = append(cmd, args[1])
	}
	if slices.Contains([]string{"version"}, args[0]) {
		return
	}
	known := flagsOf(t, cmd...)
	for _, a := range args[len(cmd):] {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !slices.Contains(known, name) {
			t.Errorf("%s: promptgate %s has no flag --%s (it has %v)", page, strings.Join(cmd, " "), name, known)
		}
	}
}

// goTestTarget matches a Test, Benchmark or Fuzz function's declaration.
var goTestTarget = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)

// checkGoTest fails when a `go test` command of a page names a package folder that does not exist,
// or a -run, -bench or -fuzz pattern that matches no function of its packages.
func checkGoTest(t *testing.T, page string, words []string) {
	t.Helper()
	var pkgs, patterns []string
	for i := 2; i < len(words); i++ {
		w := words[i]
		switch {
		case (w == "-run" || w == "-bench" || w == "-fuzz") && i+1 < len(words):
			if p := words[i+1]; p != "^$" && p != "." && p != "XXX" {
				patterns = append(patterns, p)
			}
			i++
		case strings.HasPrefix(w, "./"):
			pkgs = append(pkgs, strings.TrimSuffix(w, "/..."))
		case strings.HasPrefix(w, "-") && !strings.Contains(w, "="):
			if slices.Contains([]string{"-timeout", "-count", "-benchtime", "-cpu", "-tags"}, w) {
				i++
			}
		}
	}
	if len(pkgs) == 0 {
		t.Errorf("%s: go test names no package: %q", page, words)
	}
	var funcs []string
	for _, p := range pkgs {
		files, _ := filepath.Glob(inRepo(filepath.Join(p, "*_test.go")))
		if len(files) == 0 {
			t.Errorf("%s: go test %s: no test files there", page, p)
		}
		if strings.HasSuffix(words[len(words)-1], "/...") {
			more, _ := filepath.Glob(inRepo(filepath.Join(p, "*", "*_test.go")))
			files = append(files, more...)
		}
		for _, f := range files {
			b, _ := os.ReadFile(f)
			for _, m := range goTestTarget.FindAllSubmatch(b, -1) {
				funcs = append(funcs, string(m[1]))
			}
		}
	}
	for _, p := range patterns {
		re, err := regexp.Compile(strings.Split(p, "/")[0])
		if err != nil {
			t.Errorf("%s: pattern %q: %v", page, p, err)
			continue
		}
		if !slices.ContainsFunc(funcs, re.MatchString) {
			t.Errorf("%s: go test %q: %q matches no test, benchmark or fuzz target of %v", page, words, p, pkgs)
		}
	}
}

// jsonObjects are the JSON objects written in backquotes in a text, in order (`{...}` spans that
// parse).
func jsonObjects(s string) []string {
	var out []string
	for _, m := range regexp.MustCompile("`(\\{[^`]*\\})`").FindAllStringSubmatch(s, -1) {
		if gjson.Valid(m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// oneLine is s with every run of white space (line breaks of the page included) as one space.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// demoModel runs the demo's scripted model on a test server and returns its root URL (an OpenAI or
// Anthropic upstream is ROOT/v1).
func demoModel(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(demo.Handler(demo.Options{}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// inlineCommand is a command written in a code span of a page's text: `promptgate ...`,
// `go run ./cmd/promptgate ...` or `go test ...` (after any VAR=value words).
var inlineCommand = regexp.MustCompile("`((?:[A-Z_]+=\\S+ )*(?:promptgate |go run \\./cmd/promptgate |go test )[^`]*)`")

// pageCommands are the promptgate and go test commands of a page, from its shell blocks and code
// spans, each as words. Placeholders of the tables are read as a user would fill them: [optional]
// parts kept, A|B alternatives as the first.
func pageCommands(t *testing.T, page string) [][]string {
	t.Helper()
	text := docPage(t, page)
	var out [][]string
	for _, b := range codeBlocks(text) {
		if b.lang != "sh" {
			continue
		}
		for _, c := range mustShell(t, b.text) {
			for _, st := range c.stages {
				out = append(out, st)
			}
		}
	}
	fenced := fencedRanges(text)
	for _, m := range inlineCommand.FindAllStringSubmatchIndex(text, -1) {
		if inRanges(fenced, m[0]) {
			continue
		}
		span := text[m[2]:m[3]]
		if regexp.MustCompile(`^([A-Z_]+=\S+ )*go test `).MatchString(span) {
			for _, c := range mustShell(t, span) {
				out = append(out, c.stages...)
			}
			continue
		}
		span = strings.NewReplacer("[", " ", "]", " ", `\|`, "|", "...", " ").Replace(span)
		words := strings.Fields(span)
		for i, w := range words {
			if a, _, ok := strings.Cut(w, "|"); ok && !strings.HasPrefix(w, "-") {
				words[i] = a
			}
		}
		out = append(out, words)
	}
	return out
}

// TestDocsCommandsAreReal: every promptgate command of every page names a command and flags
// promptgate has, and every go test command names packages and tests that exist.
func TestDocsCommandsAreReal(t *testing.T) {
	t.Parallel()
	n := 0
	for _, page := range docPages(t) {
		for _, w := range pageCommands(t, page) {
			for len(w) > 0 && regexp.MustCompile(`^[A-Z_]+=`).MatchString(w[0]) {
				w = w[1:]
			}
			if args, ok := cliArgs(w); ok {
				if len(args) > 0 && args[0] != strings.ToLower(args[0]) {
					continue // `promptgate COMMAND -h`
				}
				checkCLIWords(t, page, args)
				n++
			} else if len(w) > 1 && w[0] == "go" && w[1] == "test" {
				checkGoTest(t, page, w)
				n++
			} else if bench, ok := benchArgs(w); ok {
				checkBenchFlags(t, page, bench)
				n++
			}
		}
	}
	if n < 40 {
		t.Errorf("only %d commands found on the pages", n)
	}
}

// benchArgs are the arguments of a run of the benchmark harness on a page: `go run
// ./cmd/promptgate-bench ...` or the binary the pages build from it, /tmp/pgb.
func benchArgs(words []string) ([]string, bool) {
	switch {
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/promptgate-bench":
		return words[3:], true
	case len(words) >= 1 && words[0] == "/tmp/pgb":
		return words[1:], true
	}
	return nil, false
}

// checkBenchFlags fails when a run of the harness names a flag the harness does not define.
func checkBenchFlags(t *testing.T, page string, args []string) {
	t.Helper()
	src := sourceFiles(t, "cmd/promptgate-bench")
	known := literals(src, regexp.MustCompile(`\b(?:fs|flag)\.(?:String|Int|Bool|Duration|Float64|Var|StringVar|IntVar|BoolVar|DurationVar|Float64Var)\((?:&[^,]+, )?"([a-z-]+)"`))
	if len(known) < 10 {
		t.Fatalf("the harness defines only %d flags: %v", len(known), known)
	}
	for _, a := range args {
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		if !slices.Contains(known, name) {
			t.Errorf("%s: the harness has no flag --%s (it has %v)", page, name, known)
		}
	}
}
