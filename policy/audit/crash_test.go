package audit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// envCrashRing makes the test binary the child of TestRingCrashLosesOnlyTheOpenWindow: it opens the
// ring at that path and records into it until it is killed.
const envCrashRing = "PROMPTGATE_AUDIT_CRASH_RING"

// A process killed between windows leaves every committed window in the file, whole and in order,
// and loses only the events of the window that was open.
func TestRingCrashLosesOnlyTheOpenWindow(t *testing.T) {
	if path := os.Getenv(envCrashRing); path != "" {
		crashChild(path)
		return
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "audit.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestRingCrashLosesOnlyTheOpenWindow$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCrashRing+"="+path)
	stdin, err := cmd.StdinPipe() // the child waits on it until it is killed
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child: %q, %v", line, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	r, err := OpenRing(path, 1000, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Two committed windows (a flush, then a full batch) survive; the open window's three events do
	// not.
	wantSeq(t, allEvents(t, r), 5+maxBatch)
}

// crashChild records two committed windows and an open one, says "ready" and waits to be killed.
func crashChild(path string) {
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	r, err := OpenRingWith(path, 1000, nil, Options{Window: time.Hour})
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	n := 0
	record := func(k int) {
		for range k {
			n++
			r.Record(ctx, ev(n))
		}
	}
	record(5)
	if err := r.Flush(); err != nil {
		fail(err)
	}
	record(maxBatch) // ends its window by itself
	for deadline := time.Now().Add(hangBound); r.Stats().Written < uint64(5+maxBatch); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			fail(fmt.Errorf("a full batch was not written: %+v", r.Stats()))
		}
	}
	record(3)
	if s := r.Stats(); s.Written != uint64(5+maxBatch) || s.Dropped != 0 {
		fail(fmt.Errorf("stats %+v", s))
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(2) // the parent closed stdin without killing this process
}
