package main

import (
	"os"
	"path/filepath"
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

// TestPreviewCandidate: --candidate KIND/NAME@VERSION previews a stored version that is not active
// as if it were (on the DB file, and through a running server's admin API), while the active one
// still serves; a bad form is a usage error, a version the store lacks is refused naming it.
func TestPreviewCandidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "pg.db")
	support, err := os.ReadFile(supportFile(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(support), `"directives": [`) {
		t.Fatal("support.json has no directives")
	}
	v1 := writeFile(t, dir, "v1.json", string(support))
	const directive = "Sign every answer as the support team."
	v2 := writeFile(t, dir, "v2.json", strings.Replace(string(support), `"directives": [`, `"directives": ["`+directive+`", `, 1))
	if _, errOut, err := runCmd(t, nil, "", "protocols", "push", "--activate", v1, "--db", db, "--create"); err != nil {
		t.Fatalf("%v %s", err, errOut)
	}
	if _, errOut, err := runCmd(t, nil, "", "protocols", "push", v2, "--db", db); err != nil {
		t.Fatalf("%v %s", err, errOut)
	}
	req := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	previewed := func(out string) (int, bool) {
		return int(gjson.Get(out, "protocolVersion").Int()), strings.Contains(gjson.Get(out, "upstreamRequest.messages.0.content").String(), directive)
	}
	args := []string{"preview", "--header", "X-Promptgate-Protocol: support"}
	out, errOut, err := runCmd(t, nil, req, append(args, "--db", db)...)
	if v, has := previewed(out); err != nil || v != 1 || has {
		t.Fatalf("the active version: %v %s %s", err, out, errOut)
	}
	out, errOut, err = runCmd(t, nil, req, append(args, "--db", db, "--candidate", "protocols/support@2")...)
	if v, has := previewed(out); err != nil || v != 2 || !has {
		t.Fatalf("--candidate on the DB: %v %s %s", err, out, errOut)
	}
	if _, _, err := runCmd(t, nil, req, append(args, "--db", db, "--candidate", "protocols/support@9")...); exitCode(err) != 1 ||
		!strings.Contains(err.Error(), "candidate protocols/support@9 is not in the store") {
		t.Errorf("a version the store lacks: %v", err)
	}
	for _, bad := range []string{"support@2", "protocol/support@2", "tools/x@1", "protocols/support", "protocols/support@0", "protocols/support@two",
		"protocols/support@02", "protocols/sup port@2", "protocols/@2", "templates/x@-1"} {
		if _, _, err := runCmd(t, nil, req, append(args, "--db", db, "--candidate", bad)...); exitCode(err) != 2 || !strings.Contains(err.Error(), "--candidate") {
			t.Errorf("--candidate %q: exit %d %v, want 2", bad, exitCode(err), err)
		}
	}
	// Through the admin API of the server that holds the DB.
	s := startServe(t, nil, "--upstream", demoModel(t)+"/v1", "--db", db)
	out, errOut, err = runCmd(t, nil, req, append(args, "--admin", s.admin, "--candidate", "protocols/support@2")...)
	if v, has := previewed(out); err != nil || v != 2 || !has || !strings.Contains(errOut, "admin API") {
		t.Errorf("--candidate over the admin API: %v %s %s", err, out, errOut)
	}
	if _, _, err := runCmd(t, nil, req, append(args, "--admin", s.admin, "--candidate", "templates/nosuch@1")...); err == nil || !strings.Contains(err.Error(), "candidate") {
		t.Errorf("a template the store lacks, over the admin API: %v", err)
	}
}
