package main

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy/sse"
)

// inRepo is a path relative to the repository's top folder (the one examples/ is in), seen from
// this package.
func inRepo(path string) string { return filepath.Join(filepath.Dir(examplesDir), path) }

// readmeSection is the text of the README section under the heading "## title", up to the next "##
// ".
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	return docSection(t, "README.md", title)
}

// readmeRequest is the request of a curl command of the README, sent to the demo at addr instead of
// the default address; -d @FILE reads FILE from the repository's root without its line breaks, as
// curl does.
func readmeRequest(t *testing.T, cmd, addr string) *http.Request {
	t.Helper()
	cmds, err := shellWords(strings.ReplaceAll(cmd, "127.0.0.1:8787", addr))
	if err != nil || len(cmds) != 1 {
		t.Fatalf("%q: %v", cmd, err)
	}
	words := cmds[0]
	for i, w := range words {
		if file, ok := strings.CutPrefix(w, "@"); ok && i > 0 && words[i-1] == "-d" {
			b, err := os.ReadFile(inRepo(file))
			if err != nil {
				t.Fatal(err)
			}
			words[i] = strings.NewReplacer("\r", "", "\n", "").Replace(string(b))
		}
	}
	return curlRequest(t, words)
}

// readmeDemo is the title of the README's section on the demo.
const readmeDemo = "Try it without a key: the demo"

// TestReadmeWorkedExampleRuns runs the README's worked example against `promptgate demo`: its
// commands work as written (on the demo's ports), and what it shows of the answers is what the demo
// answers.
func TestReadmeWorkedExampleRuns(t *testing.T) {
	sec := readmeSection(t, readmeDemo)
	blocks := codeBlocks(sec)
	if len(blocks) != 5 || blocks[0].text != "go run ./cmd/promptgate demo\n" {
		t.Fatalf("the section's code blocks changed: update this test (%d blocks)", len(blocks))
	}
	printed, _ := startDemo(t, nil)
	addr := regexp.MustCompile(`listening on http://([^/]+)/v1`).FindStringSubmatch(printed)[1]
	admin := regexp.MustCompile(`admin API on http://(\S+)`).FindStringSubmatch(printed)[1]

	// The first command, and the layered prompt the README shows: each of its lines is a line of
	// the answer.
	resp, b := do(t, readmeRequest(t, blocks[1].text, addr))
	answer := gjson.GetBytes(b, "choices.0.message.content").String()
	for h, v := range map[string]string{"X-Promptgate-Protocol": "demo", "X-Promptgate-Template": "base_tool_call_v2@1", "X-Promptgate-Tools-Removed": "run_shell"} {
		if resp.Header.Get(h) != v || !strings.Contains(sec, "`"+h+": "+v+"`") {
			t.Errorf("%s: %q (the README says %q)", h, resp.Header.Get(h), v)
		}
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(answer, "\n") {
		lines[l] = true
	}
	for _, l := range strings.Split(blocks[2].text, "\n") {
		if l != "" && !lines[l] {
			t.Errorf("the README shows a line the model did not get: %q", l)
		}
	}

	// The preview through the demo's admin API.
	cmd := strings.Fields(strings.ReplaceAll(blocks[3].text, "127.0.0.1:8788", admin))
	if strings.Join(cmd[:3], " ") != "go run ./cmd/promptgate" {
		t.Fatalf("preview command %q", cmd)
	}
	args := append([]string(nil), cmd[3:]...)
	args[len(args)-1] = inRepo(args[len(args)-1])
	out, errOut, err := runCmd(t, nil, "", args...)
	if err != nil || gjson.Get(out, "protocolId").String() != "demo" || !strings.Contains(gjson.Get(out, "upstreamRequest.messages.0.content").String(), blocks[2].text[:40]) {
		t.Errorf("preview: %v %s %s", err, out, errOut)
	}

	// The second command's stream: the README's deltas are deltas of the demo's answer.
	printedCmds, err := shellWords(printed[strings.Index(printed, "# 1."):strings.Index(printed, "Decisions:")])
	if err != nil {
		t.Fatal(err)
	}
	_, b = do(t, curlRequest(t, printedCmds[1]))
	var deltas []string
	rd := sse.NewReader(bytes.NewReader(b))
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		deltas = append(deltas, gjson.GetBytes(ev.Data, "choices.0.delta.content").String())
	}
	shown := regexp.MustCompile(`"content":("(?:[^"\\]|\\.)*")`).FindAllStringSubmatch(blocks[4].text, -1)
	if len(shown) != 2 {
		t.Fatalf("stream block: %q", blocks[4].text)
	}
	for _, m := range shown {
		if c := gjson.Parse(m[1]).String(); !strings.Contains(strings.Join(deltas, "\x00"), c) {
			t.Errorf("the README shows a delta %q that the stream does not have: %q", c, deltas)
		}
	}

	// The third: the held notice as the README quotes it, with the demo's code.
	_, b = do(t, curlRequest(t, printedCmds[2]))
	held := gjson.GetBytes(b, `content.#(text%"*held tool call*").text`).String()
	code := regexp.MustCompile(`[0-9A-Z]{4}-[0-9A-Z]{4}`).FindString(held)
	quoted := regexp.MustCompile("(?s)`(\\[promptgate\\] held tool call.*?)`").FindStringSubmatch(sec)
	if code == "" || quoted == nil || strings.ReplaceAll(strings.Join(strings.Fields(quoted[1]), " "), "7KQM-3XPA", code) != held {
		t.Errorf("the README's notice is not the demo's:\n%q\n%q", quoted, held)
	}
}

// TestReadmeQuickStart: the two commands of the quick start are the serve command and exactly the
// test command .ci/run runs; serve as written (its listeners moved to free ports) creates the files
// the README names in the working folder and listens where it says, in front of the upstream it
// names.
func TestReadmeQuickStart(t *testing.T) {
	sec := readmeSection(t, "Quick start")
	blocks := blocksOf(sec, "sh")
	if len(blocks) != 2 || blocks[0] != "go run ./cmd/promptgate serve\n" {
		t.Fatalf("the quick start's commands changed: update this test: %q", blocks)
	}
	ci := docPage(t, ".ci/run")
	_, after, ok := strings.Cut(ci, "# The README's test command:\n")
	if !ok || !strings.HasPrefix(after, blocks[1]) || blocks[1] != "go test -race -count=1 ./...\n" {
		t.Errorf(".ci/run and the README disagree on the test command: README %q, .ci/run %q", blocks[1], strings.SplitN(after, "\n", 2)[0])
	}
	for _, want := range []string{"`127.0.0.1:8787`", "`http://127.0.0.1:8787/v1`", "`127.0.0.1:8788`",
		"`" + DefaultUpstream + "`", "about 3 minutes on 2 cores", "about 15 minutes on 2 cores"} {
		if !strings.Contains(sec, want) {
			t.Errorf("the quick start no longer says %s", want)
		}
	}
	if DefaultListen != "127.0.0.1:8787" || DefaultAdminListen != "127.0.0.1:8788" {
		t.Errorf("defaults %s, %s: the README says 127.0.0.1:8787 and 127.0.0.1:8788", DefaultListen, DefaultAdminListen)
	}
	args, ok := cliArgs(strings.Fields(blocks[0]))
	if !ok {
		t.Fatal(blocks[0])
	}
	t.Chdir(t.TempDir())
	s := startServe(t, nil, args[1:]...)
	resp, err := http.Get(strings.TrimSuffix(s.base, "/v1") + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %v %v", err, resp)
	}
	resp.Body.Close()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"promptgate.db", "promptgate.audit.db"} {
		if _, err := os.Stat(f); err != nil || !strings.Contains(sec, "`"+f+"`") {
			t.Errorf("%s in the working folder: %v", f, err)
		}
	}
}

// TestReadmeLayersPicture: the picture of the layers shows the built-in template's block headers,
// in its order, so it cannot drift from what the model gets.
func TestReadmeLayersPicture(t *testing.T) {
	t.Parallel()
	pic := blocksOf(readmeSection(t, "The layers"), "text")
	if len(pic) != 1 {
		t.Fatalf("the section's picture changed: update this test (%d text blocks)", len(pic))
	}
	var shown []string
	for _, m := range regexp.MustCompile(`=== ([A-Z ]+)[^=]*===`).FindAllStringSubmatch(pic[0], -1) {
		shown = append(shown, strings.TrimSpace(m[1]))
	}
	out, _, err := runCmd(t, nil, "", "templates", "show", "base_tool_call_v2", "--create", "--db", filepath.Join(t.TempDir(), "pg.db"))
	if err != nil {
		t.Fatal(err)
	}
	var real []string
	for _, m := range regexp.MustCompile(`(?m)^=== ([A-Z ]+)[^=\n]*===$`).FindAllStringSubmatch(gjson.Get(out, "body.text").String(), -1) {
		real = append(real, strings.TrimSpace(m[1]))
	}
	if strings.Join(shown, "|") != strings.Join(real, "|") {
		t.Errorf("the picture shows the blocks %q; the template has %q", shown, real)
	}
}
