package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/promptgate/promptgate/plugins/sdk"
	"github.com/promptgate/promptgate/plugins/sdk/sdktest"
)

func TestGather(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "memory")
	must(t, os.Mkdir(dir, 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "alice.json"), []byte(" {\"b\":1,\"a\":[\"x\"]}\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "u%2Fx.json"), []byte(`{"who":"u/x"}`), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "broken.json"), []byte(`[1]`), 0o600))
	must(t, os.WriteFile(filepath.Join(base, "secret.json"), []byte(`{"secret":1}`), 0o600))
	must(t, os.Symlink(filepath.Join(base, "secret.json"), filepath.Join(dir, "link.json")))

	p := sdktest.New(t, &source{}, sdktest.Options{})
	ctx := context.Background()
	must(t, p.Configure(ctx, map[string]any{"dir": dir}))
	for _, tc := range []struct{ user, fields, err string }{
		{user: "alice", fields: `{"b":1,"a":["x"]}`},
		{user: "u/x", fields: `{"who":"u/x"}`},
		{user: "bob", fields: `{}`},
		{user: "", fields: `{}`},
		{user: "../secret", fields: `{}`},
		{user: "..", fields: `{}`},
		{user: strings.Repeat("a", 300), fields: `{}`},
		{user: "link", err: "cannot be opened"}, // a symlink out of dir
		{user: "broken", err: "not a JSON object"},
	} {
		res, err := p.Gather(ctx, sdk.Request{User: tc.user, Mode: sdk.ModeStandard})
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("user %q: err = %v, want %q", tc.user, err, tc.err)
			}
		case err != nil:
			t.Errorf("user %q: %v", tc.user, err)
		case string(res.Fields) != tc.fields:
			t.Errorf("user %q: %s, want %s", tc.user, res.Fields, tc.fields)
		}
	}
}

func TestConfigure(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []map[string]any{nil, {"dir": ""}, {"dir": "/does/not/exist"}, {"dir": t.TempDir(), "extra": 1}, {"dir": t.TempDir(), "maxBytes": -1}} {
		if err := sdktest.New(t, &source{}, sdktest.Options{}).Configure(ctx, cfg); err == nil {
			t.Errorf("config %v accepted", cfg)
		}
	}
}

func TestMaxBytes(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "big.json"), []byte(`{"a":"`+strings.Repeat("x", 100)+`"}`), 0o600))
	p := sdktest.New(t, &source{}, sdktest.Options{})
	must(t, p.Configure(context.Background(), map[string]any{"dir": dir, "maxBytes": 50}))
	if _, err := p.Gather(context.Background(), sdk.Request{User: "big"}); err == nil || !strings.Contains(err.Error(), "over 50 bytes") {
		t.Errorf("err = %v", err)
	}
}

func TestFileName(t *testing.T) {
	for user, want := range map[string]string{
		"alice":         "alice.json",
		"a.b@c-d_e":     "a.b@c-d_e.json",
		"../x":          "%2E.%2Fx.json",
		".hidden":       "%2Ehidden.json",
		"a/b":           "a%2Fb.json",
		"a%2Fb":         "a%252Fb.json",
		`c:\x`:          "c%3A%5Cx.json",
		"\x00":          "%00.json",
		"日本":            "%E6%97%A5%E6%9C%AC.json",
		"con\nsole\r\t": "con%0Asole%0D%09.json",
	} {
		if got := fileName(user); got != want {
			t.Errorf("fileName(%q) = %q, want %q", user, got, want)
		}
		if strings.ContainsAny(fileName(user), `/\`) || strings.HasPrefix(fileName(user), ".") {
			t.Errorf("fileName(%q) = %q escapes", user, fileName(user))
		}
	}
}

func FuzzFileName(f *testing.F) {
	for _, s := range []string{"alice", "../x", "..", "a/b", "%2F", ".", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, user string) {
		if user == "" {
			return // Gather answers {} without a file name
		}
		name := fileName(user)
		if strings.ContainsAny(name, "/\\\x00") || strings.HasPrefix(name, ".") || filepath.Base(name) != name {
			t.Fatalf("fileName(%q) = %q", user, name)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
