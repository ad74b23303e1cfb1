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

// inRepo is a path relative to the repository's top folder (the one examples/ is in), seen from this package.
func inRepo(path string) string { return filepath.Join(filepath.Dir(examplesDir), path) }

// readmeSection is the text of the README section under the heading "## title", up to the next "## ".
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile(inRepo("README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## "+title+"\n")
	if i < 0 {
		t.Fatalf("README has no section %q", title)
	}
	s = s[i+len(title)+5:]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	return s
}

// codeBlock is a fenced block of the README: its language and its text.
type codeBlock struct{ lang, text string }

var fence = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```$")

func codeBlocks(section string) []codeBlock {
	var out []codeBlock
	for _, m := range fence.FindAllStringSubmatch(section, -1) {
		out = append(out, codeBlock{m[1], m[2]})
	}
	return out
}

// readmeRequest is the request of a curl command of the README, sent to the demo at addr instead of the
// default address; -d @FILE reads FILE from the repository's root without its line breaks, as curl does.
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

// TestReadmeWorkedExampleRuns runs the README's worked example against `promptgate demo`: its commands
// work as written (on the demo's ports), and what it shows of the answers is what the demo answers.
func TestReadmeWorkedExampleRuns(t *testing.T) {
	sec := readmeSection(t, "A worked example")
	blocks := codeBlocks(sec)
	if len(blocks) != 5 || blocks[0].text != "go run ./cmd/promptgate demo\n" {
		t.Fatalf("the section's code blocks changed: update this test (%d blocks)", len(blocks))
	}
	printed, _ := startDemo(t, nil)
	addr := regexp.MustCompile(`listening on http://([^/]+)/v1`).FindStringSubmatch(printed)[1]
	admin := regexp.MustCompile(`admin API on http://(\S+)`).FindStringSubmatch(printed)[1]

	// The first command, and the layered prompt the README shows: each of its lines is a line of the answer.
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

// TestReadmeCommandsListTheCommands: the Commands section names every command of the usage text.
func TestReadmeCommandsListTheCommands(t *testing.T) {
	sec := readmeSection(t, "Commands")
	for _, want := range []string{"`promptgate demo", "push FILE", "--create", "`promptgate serve`"} {
		if !strings.Contains(sec, want) {
			t.Errorf("the Commands section does not mention %q", want)
		}
	}
}
