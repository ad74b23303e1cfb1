package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy/config"
)

// The tests of docs/apps.md: its curl commands are sent to `promptgate demo`, its request extension
// is previewed through the admin API, and its HTTPS-proxy door setup is run as written.

const appsPage = "docs/apps.md"

// onlyCurl is the one curl command of a section's shell blocks.
func onlyCurl(t *testing.T, title string) []string {
	t.Helper()
	var curls [][]string
	for _, b := range blocksOf(docSection(t, appsPage, title), "sh") {
		for _, c := range mustShell(t, b) {
			if c.words()[0] == "curl" {
				curls = append(curls, c.words())
			}
		}
	}
	if len(curls) != 1 {
		t.Fatalf("%s: %d curl commands: update this test", title, len(curls))
	}
	return curls[0]
}

// TestAppsChatExample: every SDK snippet and the environment variable of the page use the
// listener's default base URL, and the chat curl gets the demo's echo of the layered prompt with
// the app's instructions in it.
func TestAppsChatExample(t *testing.T) {
	t.Parallel()
	sec := docSection(t, appsPage, "Chat Completions")
	for _, b := range codeBlocks(sec) {
		if b.lang != "sh" && !strings.Contains(b.text, `"http://127.0.0.1:8787/v1"`) {
			t.Errorf("a %s snippet does not use the base URL http://127.0.0.1:8787/v1:\n%s", b.lang, b.text)
		}
	}
	if !strings.Contains(sec, "export OPENAI_BASE_URL=http://"+DefaultListen+"/v1") {
		t.Error("the page's OPENAI_BASE_URL is not the default listener's")
	}
	d := newDemo(t)
	code, h, out := respBody(t, docCurl(t, onlyCurl(t, "Chat Completions"), d.proxy, d.admin))
	content := gjson.Get(out, "choices.0.message.content").String()
	if code != http.StatusOK || h.Get("X-Promptgate-Protocol") != "demo" ||
		!strings.Contains(content, "The system prompt I received") ||
		!strings.Contains(content, "=== APPLICATION INSTRUCTIONS ===\nYou are a travel agent.\n") {
		t.Errorf("%d %v %s", code, h, out)
	}
}

// TestAppsResponsesExample: the Responses curl's answer echoes the client's own instructions, as
// the page says, while the model got the layered prompt.
func TestAppsResponsesExample(t *testing.T) {
	t.Parallel()
	sec := docSection(t, appsPage, "The Responses API")
	m := regexp.MustCompile("The answer's `instructions` is the client's own, `(\"[^`]+\")`").FindStringSubmatch(oneLine(sec))
	if m == nil {
		t.Fatal("the section's example changed: update this test")
	}
	d := newDemo(t)
	code, _, out := respBody(t, docCurl(t, onlyCurl(t, "The Responses API"), d.proxy, d.admin))
	if code != http.StatusOK || gjson.Get(out, "instructions").Raw != m[1] ||
		!strings.Contains(gjson.Get(out, "output.0.content.0.text").String(), "=== SYSTEM CORE ===") {
		t.Errorf("%d %s", code, out)
	}
}

// TestAppsMessagesExample: the Anthropic curl is answered in Anthropic's shape, the model having
// got the layered prompt as its system.
func TestAppsMessagesExample(t *testing.T) {
	t.Parallel()
	d := newDemo(t)
	code, _, out := respBody(t, docCurl(t, onlyCurl(t, "The Anthropic Messages API"), d.proxy, d.admin))
	if code != http.StatusOK || gjson.Get(out, "type").String() != "message" ||
		!strings.Contains(gjson.Get(out, "content.0.text").String(), "=== SYSTEM CORE ===") {
		t.Errorf("%d %s", code, out)
	}
}

// TestAppsGeminiExample: the Gemini curl is answered in Gemini's shape, the demo's model having got
// the layered prompt as its systemInstruction.
func TestAppsGeminiExample(t *testing.T) {
	t.Parallel()
	d := newDemo(t)
	code, _, out := respBody(t, docCurl(t, onlyCurl(t, "Google's Gemini API"), d.proxy, d.admin))
	if code != http.StatusOK || gjson.Get(out, "candidates.0.finishReason").String() != "STOP" ||
		!strings.Contains(gjson.Get(out, "candidates.0.content.parts.0.text").String(), "=== SYSTEM CORE ===") {
		t.Errorf("%d %s", code, out)
	}
}

// TestAppsRequestExtension previews the page's request extension through the admin API (with the
// workflow it names pushed): the field is read and removed, its context is in the runtime context
// line, and a misspelt key is refused as the page says.
func TestAppsRequestExtension(t *testing.T) {
	t.Parallel()
	sec := docSection(t, appsPage, "The request extension")
	blocks := blocksOf(sec, "json")
	if len(blocks) != 1 {
		t.Fatalf("%d JSON blocks: update this test", len(blocks))
	}
	ext := gjson.Get("{"+blocks[0]+"}", "promptgate")
	if !ext.IsObject() {
		t.Fatalf("the block is not a promptgate member: %s", blocks[0])
	}
	d := newDemo(t)
	d.push(t, fmt.Sprintf(`{"id":%q,"extends":%q,"promptTemplate":{"base":"base_tool_call_v2"},"tools":{"allow":["*"]}}`,
		ext.Get("workflow").String(), ext.Get("protocol").String()))
	preview := func(request string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+d.admin+"/admin/prompts/preview",
			strings.NewReader(`{"request":`+request+`}`))
		req.Header.Set("Content-Type", "application/json")
		code, _, out := respBody(t, req)
		return code, out
	}
	code, out := preview(`{"model":"m","messages":[{"role":"user","content":"hi"}],` + blocks[0] + `}`)
	sys := gjson.Get(out, "upstreamRequest.messages.0.content").String()
	if code != http.StatusOK || gjson.Get(out, "protocolId").String() != ext.Get("workflow").String() ||
		gjson.Get(out, "baseProtocolId").String() != ext.Get("protocol").String() ||
		gjson.Get(out, "upstreamRequest.promptgate").Exists() ||
		!strings.Contains(sys, `"request":`+compactJSON(t, ext.Get("context").Raw)) {
		t.Errorf("%d %s", code, out)
	}
	code, out = preview(`{"model":"m","messages":[{"role":"user","content":"hi"}],"promptgate":{"protocl":"tech"}}`)
	if code != http.StatusBadRequest || gjson.Get(out, "error.code").String() != "invalid_request" || !strings.Contains(out, "protocl") {
		t.Errorf("a misspelt key: %d %s", code, out)
	}
}

// TestAppsHTTPSProxyDoorSetup runs the door's three commands as written, in a new folder: the CA is
// written, the config loads through the config loader, and serve starts with the door.
func TestAppsHTTPSProxyDoorSetup(t *testing.T) {
	sec := docSection(t, appsPage, "The HTTPS-proxy door (`HTTPS_PROXY=`)")
	blocks := blocksOf(sec, "sh")
	if len(blocks) != 1 {
		t.Fatalf("%d shell blocks: update this test", len(blocks))
	}
	cmds := mustShell(t, blocks[0])
	if len(cmds) != 3 || cmds[1].words()[0] != "cat" || len(cmds[1].redirs) != 1 {
		t.Fatalf("the commands changed: update this test: %q", blocks[0])
	}
	t.Chdir(t.TempDir())
	ca, _ := cliArgs(cmds[0].words())
	if out, errOut, err := runCmd(t, nil, "", ca...); err != nil {
		t.Fatalf("%q: %v %s %s", ca, err, out, errOut)
	}
	if err := os.WriteFile(cmds[1].redirs[0], []byte(cmds[1].heredoc), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := config.Load(cmds[1].redirs[0]); err != nil || f.MITM == nil || len(f.MITM.Hosts) == 0 {
		t.Fatalf("the page's config: %v", err)
	}
	serve, _ := cliArgs(cmds[2].words())
	for i, a := range serve {
		if a == "--proxy-listen" {
			serve[i+1] = "127.0.0.1:0"
		}
	}
	s := startServe(t, nil, serve[1:]...)
	var door string
	for _, l := range strings.Split(s.stderr.String(), "\n") {
		if gjson.Get(l, "msg").String() == "HTTPS-proxy door open" {
			door = gjson.Get(l, "listen").String()
		}
	}
	resp, err := http.Get("http://" + door + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the door (%q) does not answer: %v %v\n%s", door, err, resp, s.stderr.String())
	}
	resp.Body.Close()
}

// compactJSON is a JSON text without its insignificant white space.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
