package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestShadowCommands: protocols shadow and unshadow on the DB file, as list and history show them,
// and the bad forms of their arguments refused with the reason.
func TestShadowCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "pg.db")
	file := writeFile(t, dir, "pushed.json", pushedProtocol)
	for _, args := range [][]string{{"push", file, "--activate", "--create"}, {"push", file}} {
		if _, errOut, err := runCmd(t, nil, "", append(append([]string{"protocols"}, args...), "--db", db)...); err != nil {
			t.Fatalf("push: %v %s", err, errOut)
		}
	}
	out, _, err := runCmd(t, nil, "", "protocols", "shadow", "pushed", "2", "--db", db)
	if err != nil || out != "protocols pushed: version 2 in shadow: it judges every request beside the active version, for the record\n" {
		t.Fatalf("shadow: %v %q", err, out)
	}
	if out, _, _ := runCmd(t, nil, "", "protocols", "list", "--db", db); !strings.Contains(out, "pushed") || !strings.Contains(out, "active 1    versions 2 shadow 2") {
		t.Fatalf("list: %q", out)
	}
	if out, _, _ := runCmd(t, nil, "", "protocols", "history", "pushed", "--db", db); !strings.Contains(out, "* 1 ") || !strings.Contains(out, "s 2 ") {
		t.Fatalf("history: %q", out)
	}
	for _, c := range []struct {
		args  []string
		usage bool   // exit 2
		want  string // in the error
	}{
		{[]string{"protocols", "shadow", "pushed", "9"}, false, "not found"},            // an unknown version
		{[]string{"protocols", "shadow", "neutral", "2"}, false, "protocols/neutral@2"}, // a version of another protocol
		{[]string{"protocols", "shadow", "pushed", "1"}, false, "is the active version"},
		{[]string{"protocols", "shadow", "nope", "1"}, false, "not found"},
		{[]string{"protocols", "shadow", "pushed", "x"}, true, "not a positive number"},
		{[]string{"protocols", "shadow", "pushed", "0"}, true, "not a positive number"},
		{[]string{"protocols", "shadow", "pushed"}, true, "takes 2 argument(s)"},
		{[]string{"protocols", "unshadow"}, true, "takes 1 argument(s)"},
		{[]string{"templates", "shadow", "base_tool_call_v2", "1"}, true, "unknown subcommand"},
	} {
		_, _, err := runCmd(t, nil, "", append(c.args, "--db", db)...)
		var u usageError
		if err == nil || errors.As(err, &u) != c.usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (usage %v), want %q", c.args, err, errors.As(err, &u), c.want)
		}
	}
	out, _, err = runCmd(t, nil, "", "protocols", "unshadow", "pushed", "--db", db)
	if err != nil || out != "protocols pushed: version 2 is no longer in shadow\n" {
		t.Fatalf("unshadow: %v %q", err, out)
	}
	if _, _, err := runCmd(t, nil, "", "protocols", "unshadow", "pushed", "--db", db); err == nil || !strings.Contains(err.Error(), "no version is in shadow") {
		t.Fatalf("unshadow with none: %v", err)
	}
}

// TestSuggestRefusesBadInput: policy suggest names what is wrong with its arguments and files.
func TestSuggestRefusesBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "pg.db")
	if _, _, err := runCmd(t, nil, "", "protocols", "list", "--db", db, "--create"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"policy"}, true, "give suggest NAME"},
		{[]string{"policy", "propose", "neutral"}, true, "give suggest NAME"},
		{[]string{"policy", "suggest"}, true, "takes the protocol's name"},
		{[]string{"policy", "suggest", "a", "b"}, true, "takes the protocol's name"},
		{[]string{"policy", "suggest", "neutral", "--since", "abc"}, true, `--since "abc"`},
		{[]string{"policy", "suggest", "neutral", "--since", "0s"}, true, "more than 0"},
		{[]string{"policy", "suggest", "neutral", "--since", "-1h"}, true, "more than 0"},
		{[]string{"policy", "suggest", "neutral", "--since", "1000h"}, true, "at most 168h"},
		{[]string{"policy", "suggest", "neutral", "--since", "7d"}, true, `"7d"`},
		{[]string{"policy", "suggest", "neutral", "--db", db}, false, "no learn file at " + filepath.Join(dir, "pg.learn.db")},
		{[]string{"policy", "suggest", "neutral", "--learn", filepath.Join(dir, "none.db")}, false, "no learn file"},
		{[]string{"policy", "suggest", "neutral", "--admin", "ftp://x"}, true, "--admin"},
	} {
		_, _, err := runCmd(t, nil, "", c.args...)
		var u usageError
		if err == nil || errors.As(err, &u) != c.usage || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v (usage %v), want %q", c.args, err, errors.As(err, &u), c.want)
		}
	}
}
