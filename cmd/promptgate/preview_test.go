package main

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestPreviewCommandSurfaces(t *testing.T) {
	db := t.TempDir() + "/pg.db"
	for _, c := range []struct{ path, req, prompt string }{
		{"/v1/responses", `{"model":"gpt-4.1","instructions":"app","input":"hi","x_new":[1.50]}`, "upstreamRequest.instructions"},
		{"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":9,"system":"app","messages":[{"role":"user","content":"hi"}],"x_new":[1.50]}`, "upstreamRequest.system"},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"x_new":[1.50]}`, "upstreamRequest.messages.0.content"},
	} {
		out, errOut, err := runCmd(t, nil, c.req, "preview", "--create", "--db", db, "--path", c.path, "--header", "X-Promptgate-Protocol: tech")
		if err != nil {
			t.Fatalf("%s: %v %s", c.path, err, errOut)
		}
		if gjson.Get(out, "path").String() != c.path || gjson.Get(out, "protocolId").String() != "tech" ||
			!strings.Contains(gjson.Get(out, c.prompt).String(), "=== SYSTEM CORE ===") ||
			gjson.Get(out, "upstreamRequest.x_new").Raw != "[1.50]" || gjson.Get(out, "flow").Exists() {
			t.Errorf("%s: %s", c.path, out)
		}
	}
	// Bad forms: a path that is not a rewritten surface is a usage error; a body wrong for the
	// surface is refused as the proxy would refuse it.
	for _, p := range []string{"/v1/embeddings", "responses", ""} {
		if _, _, err := runCmd(t, nil, `{"model":"m","input":"hi"}`, "preview", "--db", db, "--path", p); exitCode(err) != 2 || !strings.Contains(err.Error(), "--path") {
			t.Errorf("--path %q: %v", p, err)
		}
	}
	if _, _, err := runCmd(t, nil, `{"model":"m","input":5}`, "preview", "--db", db, "--path", "/v1/responses"); err == nil || !strings.Contains(err.Error(), "input") {
		t.Errorf("wrong body for /v1/responses: %v", err)
	}
	if _, _, err := runCmd(t, nil, `{"model":"m","input":"hi"}`, "preview", "--db", db, "--path", "/v1/messages"); err == nil || !strings.Contains(err.Error(), "messages") {
		t.Errorf("wrong body for /v1/messages: %v", err)
	}
}
