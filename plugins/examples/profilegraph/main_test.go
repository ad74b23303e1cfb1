package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/promptgate/promptgate/plugins/sdk"
	"github.com/promptgate/promptgate/plugins/sdk/sdktest"
)

const users = `{
  "u-1": {
    "interests": ["jazz", {"name": "distributed systems", "weight": 9}, "Jazz", {"label": "chess", "score": 3}, 42, {}],
    "projects": [{"title": "promptgate", "count": 2}],
    "goals": [], "tools": ["go"],
    "boundaries": ["no medical advice", "no politics"],
    "relationship": {"trusted": true, "mentor": false, "stage": "peer", "colleague": true}
  },
  "u-2": {"relationship": "not an object"}
}`

func TestModes(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(file, []byte(users), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"file": file, "limit": 3}
	for _, tc := range []struct {
		mode sdk.Mode
		user string
		want string
	}{
		{sdk.ModeMinimal, "u-1", `{}`},
		{sdk.ModeStandard, "u-1", `{"interests":["distributed systems","chess","jazz"],"projects":["promptgate"],"tools":["go"],` +
			`"boundaries":["no medical advice","no politics"],"relationship":["trusted","colleague"]}`},
		{sdk.ModeFull, "u-1", `{"interests":["distributed systems","chess","jazz"],"projects":["promptgate"],"tools":["go"],` +
			`"boundaries":["no medical advice","no politics"],"relationship":["trusted","colleague"],` +
			`"relationshipFlags":{"trusted":true,"mentor":false,"stage":"peer","colleague":true}}`},
		{sdk.ModeFull, "u-2", `{}`},
		{sdk.ModeFull, "nobody", `{}`},
		{sdk.ModeFull, "", `{}`},
	} {
		res := sdktest.Run(t, &source{}, cfg, sdk.Request{Mode: tc.mode, User: tc.user})
		if string(res.Fields) != tc.want {
			t.Errorf("%s %s:\n got %s\nwant %s", tc.mode, tc.user, res.Fields, tc.want)
		}
	}
}

func TestReloadsChangedFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(file, []byte(`{"u":{"tools":["vim"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := sdktest.New(t, &source{}, sdktest.Options{})
	ctx := context.Background()
	if err := p.Configure(ctx, map[string]any{"file": file}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(`{"u":{"tools":["emacs","vim"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(file, later, later); err != nil {
		t.Fatal(err)
	}
	res, err := p.Gather(ctx, sdk.Request{Mode: sdk.ModeStandard, User: "u"})
	if err != nil || string(res.Fields) != `{"tools":["emacs","vim"]}` {
		t.Errorf("after the change: %s %v", res.Fields, err)
	}
}

func TestConfigure(t *testing.T) {
	ctx := context.Background()
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`[]`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []map[string]any{nil, {"file": "/does/not/exist"}, {"file": bad}, {"file": bad, "limit": 99}} {
		if err := sdktest.New(t, &source{}, sdktest.Options{}).Configure(ctx, cfg); err == nil {
			t.Errorf("config %v accepted", cfg)
		}
	}
}
