//go:build unix

package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nobody is the unprivileged user a root test process runs serve as, so that file modes apply.
const nobody = 65534

// serveError runs serve on db and returns its error message ("" when it started). Root writes
// whatever the modes say, so as root serve runs in a child process as an unprivileged user.
func serveError(t *testing.T, db string) string {
	t.Helper()
	args := []string{"serve", "--db", db, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}
	if os.Geteuid() != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := run(ctx, args, nil, io.Discard, io.Discard, envMap(nil)); err != nil {
			return err.Error()
		}
		return ""
	}
	// The child must be able to run a copy of this test binary.
	dir := t.TempDir()
	bin := filepath.Join(dir, "promptgate.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	openUp(t, dir)
	cmd := helper(t, "run", envHelpIn+"="+jsonArgs(args))
	cmd.Path, cmd.Args[0] = bin, bin
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() != 0 {
		return string(out)
	} else if err != nil {
		t.Fatalf("child as uid %d: %v\n%s", nobody, err, out)
	}
	return ""
}

// openUp lets every user traverse dir and its parent (t.TempDir makes them 0700).
func openUp(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFaultReadOnlyDB(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		db, _ := seededDB(t)
		openUp(t, filepath.Dir(db))
		if err := os.Chmod(db, 0o444); err != nil {
			t.Fatal(err)
		}
		msg := serveError(t, db)
		if !strings.Contains(msg, db) || !strings.Contains(msg, "permission denied") {
			t.Fatalf("serve on a read-only DB file: %q", msg)
		}
		t.Logf("serve: %s", strings.TrimSpace(msg))
	})
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		openUp(t, dir)
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
		db := filepath.Join(dir, "pg.db")
		msg := serveError(t, db)
		if !strings.Contains(msg, db) || !strings.Contains(msg, "permission denied") {
			t.Fatalf("serve with the DB in a read-only directory: %q", msg)
		}
		t.Logf("serve: %s", strings.TrimSpace(msg))
	})
}
