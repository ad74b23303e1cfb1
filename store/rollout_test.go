package store_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/store"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadRolloutFileErrors(t *testing.T) {
	cases := []struct {
		name, content string
		want          []string
	}{
		{"bad-json", "{\n  \"id\": \"x\",\n  \"templates\": [}\n}", []string{"JSON syntax error at line 3, column 17", "invalid character '}'"}},
		{"truncated", `{"id": "x"`, []string{"JSON syntax error", "unexpected end of JSON input"}},
		{"trailing", `{"id": "x"} {}`, []string{"JSON syntax error", "after top-level value"}},
		{"unknown-key", `{"id": "x", "templates": [], "protocol": []}`, []string{`unknown key "protocol"`, `allowed: "id", "templates", "protocols"`}},
		{"unknown-key-case", `{"ID": "x", "templates": []}`, []string{`unknown key "ID"`}},
		{"missing-id", `{"templates": [{"name": "a", "text": "b"}]}`, []string{`missing "id"`}},
		{"empty-id", `{"id": "", "templates": [{"name": "a", "text": "b"}]}`, []string{"missing rollout id"}},
		{"id-not-string", `{"id": 20260224, "templates": []}`, []string{`"id" must be a string, got a number`}},
		{"array", `[{"id": "x"}]`, []string{"must hold one JSON object", "got an array"}},
		{"null", `null`, []string{"must hold one JSON object", "got null"}},
		{"empty-file", ``, []string{"JSON syntax error", "unexpected end of JSON input"}},
		{"templates-object", `{"id": "x", "templates": {"name": "a", "text": "b"}}`, []string{`"templates" must be an array of definitions, got an object`}},
		{"duplicate-key", `{"id": "x", "id": "y", "templates": []}`, []string{`duplicate key "id"`}},
		{"bad-template", `{"id": "x", "templates": [{"name": "a"}]}`, []string{`templates[0] (a): invalid: "text" must be a string`}},
		{"bad-protocol", `{"id": "x", "protocols": [{"id": "ok"}, "tech"]}`, []string{`protocols[1]: invalid: body must be a JSON object, got a string`}},
		{"nothing", `{"id": "x"}`, []string{"no templates and no protocols"}},
	}
	dir := t.TempDir()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, dir, c.name+".json", c.content)
			_, err := store.LoadRolloutFile(path)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "store: rollout file "+path+": ") || !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("error does not name the file or wrap ErrInvalid: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Fatalf("error %q lacks %q", msg, w)
				}
			}
		})
	}
	if _, err := store.LoadRolloutFile(filepath.Join(dir, "absent.json")); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "absent.json") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestLoadRolloutDirAndPending(t *testing.T) {
	dir := t.TempDir()
	// Written out of order; applied by file name.
	writeFile(t, dir, "0002-b.json", `{"id":"0002-b","protocols":[{"id":"tech","description":"b"}]}`)
	indented := "{\n  \"id\": \"0001-a\",\n  \"templates\": [\n    {\"name\": \"t\",   \"text\": \"=== SYSTEM CORE ===\\nx\"}\n  ],\n  \"protocols\": null\n}\n"
	writeFile(t, dir, "0001-a.json", indented)
	writeFile(t, dir, "README.md", "not a rollout")
	if err := os.Mkdir(filepath.Join(dir, "9999-folder.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	rs, err := store.LoadRolloutDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].ID != "0001-a" || rs[1].ID != "0002-b" {
		t.Fatalf("rollouts %+v", rs)
	}
	// Definitions are kept byte for byte as written in the file.
	if want := `{"name": "t",   "text": "=== SYSTEM CORE ===\nx"}`; string(rs[0].Templates[0]) != want {
		t.Fatalf("template bytes %s, want %s", rs[0].Templates[0], want)
	}

	s, _ := open(t)
	if err := s.ApplyRollout(ctx, rs[0]); err != nil {
		t.Fatal(err)
	}
	r, err := s.Active(ctx, store.KindTemplate, "t")
	if err != nil || !bytes.Equal(r.Body, rs[0].Templates[0]) {
		t.Fatalf("stored %s, %v", r.Body, err)
	}
	applied, _ := s.Rollouts(ctx)
	pending := store.Pending(applied, rs)
	if len(pending) != 1 || pending[0].ID != "0002-b" {
		t.Fatalf("pending %+v", pending)
	}
	// An applied id with no file is just status.
	applied = append(applied, store.AppliedRollout{ID: "gone"})
	if p := store.Pending(applied, rs); len(p) != 1 {
		t.Fatalf("pending %+v", p)
	}
	if p := store.Pending(nil, nil); p == nil || len(p) != 0 {
		t.Fatalf("Pending(nil, nil) = %#v", p)
	}

	writeFile(t, dir, "0003-c.json", `{"id":"0002-b","templates":[{"name":"u","text":""}]}`)
	if _, err := store.LoadRolloutDir(dir); err == nil || !strings.Contains(err.Error(), "0003-c.json") || !strings.Contains(err.Error(), "0002-b.json") {
		t.Fatalf("duplicate id across files: %v", err)
	}
	writeFile(t, dir, "0003-c.json", `{"id":"0003-c","templates":[{"name":"u","text":""}],"extra":1}`)
	if _, err := store.LoadRolloutDir(dir); err == nil || !strings.Contains(err.Error(), "0003-c.json") || !strings.Contains(err.Error(), `"extra"`) {
		t.Fatalf("bad file in folder: %v", err)
	}
	if _, err := store.LoadRolloutDir(filepath.Join(dir, "absent")); err == nil || !strings.HasPrefix(err.Error(), "store: ") {
		t.Fatalf("missing folder: %v", err)
	}
	empty, err := store.LoadRolloutDir(t.TempDir())
	if err != nil || empty == nil || len(empty) != 0 {
		t.Fatalf("empty folder: %#v, %v", empty, err)
	}
}
