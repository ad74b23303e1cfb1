package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/promptgate/promptgate/assembly"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/proxy/policytest"
	"github.com/promptgate/promptgate/store"
)

// testFlags are the flags of `promptgate test`.
type testFlags struct {
	verbose bool
	run     string
	junit   string
	admin   string
	store   *storeFlags
	record  recordFlags
}

// testCmd runs `promptgate test [DIR|FILE]...`: the policy test cases of the case files found
// (*.test.yaml), each through the proxy's own handler with no network; or, with --record, writes a
// case from the decision log. Exit status: 0 when every case passed, 1 when one failed, 2 for a bad
// command line or a bad case.
func testCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env) error {
	f, pos, err := parseTestFlags(args, stderr, getenv)
	if err != nil {
		return err
	}
	if f.record.id != "" {
		if len(pos) > 0 {
			return usageError{"test --record takes no DIR: it writes one case (to stdout, or to --out FILE)"}
		}
		return recordCase(ctx, f, stdout, stderr, getenv)
	}
	var filter *regexp.Regexp
	if f.run != "" {
		if filter, err = regexp.Compile(f.run); err != nil {
			return usageError{fmt.Sprintf("-run %q: not a regular expression: %v", f.run, err)}
		}
	}
	if len(pos) == 0 {
		pos = []string{"."}
	}
	files, err := findCaseFiles(pos)
	if err != nil {
		return err
	}
	cases, problems := policytest.Load(files, filter)
	if len(problems) > 0 {
		return badCases(stderr, problems)
	}
	if len(cases) == 0 {
		fmt.Fprintf(stdout, "testing: warning: no case matches -run %q\nPASS\n", f.run)
		return nil
	}
	te, problems, err := newTestEnv(ctx, f, cases, stderr, getenv)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return badCases(stderr, problems)
	}
	return runCases(ctx, te, cases, f, stdout)
}

// parseTestFlags reads the command line of `promptgate test`.
func parseTestFlags(args []string, stderr io.Writer, getenv env) (*testFlags, []string, error) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f := &testFlags{}
	fs.BoolVar(&f.verbose, "v", false, "print what was decided for every case, passed or not")
	fs.StringVar(&f.run, "run", "", "run only the cases whose name (FILE/CASE, FILE the case file's path under DIR without .test.yaml) matches this regular expression")
	fs.StringVar(&f.junit, "junit", "", "also write the results as JUnit XML to this file (for CI systems)")
	fs.StringVar(&f.admin, "admin", "", "admin API URL of a running server (token from "+EnvAdminToken+"): where cases that name a protocol by id, and --record, read; used by itself when serve holds the DB")
	f.store = addCLIStoreFlags(fs, getenv)
	addRecordFlags(fs, &f.record)
	pos, err := parseFlags(fs, args, stderr)
	if err != nil {
		return nil, nil, err
	}
	if f.record.id == "" {
		err = onlyWith(fs, "test", map[string]string{"out": "--record", "path": "--record", "events": "--record"})
	} else {
		err = onlyWith(fs, "--record", map[string]string{"run": "test", "v": "test", "junit": "test"})
	}
	return f, pos, err
}

// isCaseFile reports whether name is the name of a case file.
func isCaseFile(name string) bool {
	return slices.ContainsFunc(policytest.Suffixes(), func(s string) bool { return strings.HasSuffix(name, s) && len(name) > len(s) })
}

// caseName is a case file's name under root: its path, with / between folders, without the suffix.
func caseName(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." {
		rel = filepath.Base(path)
	}
	rel = filepath.ToSlash(rel)
	for _, s := range policytest.Suffixes() {
		if trimmed, ok := strings.CutSuffix(rel, s); ok {
			return trimmed
		}
	}
	return strings.TrimSuffix(rel, filepath.Ext(rel))
}

// findCaseFiles lists the case files of each argument: a file is taken as it is; a folder is
// searched, its sub-folders too (but not those whose name starts with a dot), for *.test.yaml and
// *.test.yml.
func findCaseFiles(roots []string) ([]policytest.FileRef, error) {
	var out []policytest.FileRef
	for _, root := range roots {
		info, err := os.Stat(root)
		if err != nil {
			return nil, usageError{fmt.Sprintf("test: %v", err)}
		}
		if !info.IsDir() {
			out = append(out, policytest.FileRef{Path: root, Name: caseName(filepath.Dir(root), root)})
			continue
		}
		n := len(out)
		err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && path != root && strings.HasPrefix(d.Name(), "."):
				return filepath.SkipDir
			case !d.IsDir() && isCaseFile(d.Name()):
				out = append(out, policytest.FileRef{Path: path, Name: caseName(root, path)})
			}
			return nil
		})
		if err != nil {
			return nil, usageError{fmt.Sprintf("test: %v", err)}
		}
		if len(out) == n {
			return nil, usageError{fmt.Sprintf("test: no case files (*%s) in %s", policytest.Suffixes()[0], root)}
		}
	}
	return out, nil
}

// badCases prints the problems of the case files and returns the error of exit status 2.
func badCases(stderr io.Writer, problems []policytest.Problem) error {
	for _, p := range problems {
		fmt.Fprintln(stderr, p)
	}
	return usageError{fmt.Sprintf("test: %d problem(s) in the case files; nothing was run", len(problems))}
}

// newTestEnv reads the config and the protocols the cases name: definition files, and stored
// versions (the store is opened only when a case names one). Problems of the cases are returned,
// each naming its field.
func newTestEnv(ctx context.Context, f *testFlags, cases []*policytest.Case, stderr io.Writer, getenv env) (*policytest.Env, []policytest.Problem, error) {
	cfg, err := config.Load(f.store.config)
	if err != nil {
		return nil, nil, err
	}
	if len(cfg.Plugins) > 0 || len(cfg.MCP.Servers) > 0 {
		fmt.Fprintln(stderr, "promptgate: test runs no plugin and no MCP server of the config: the runtime context holds only each request's own promptgate.context")
	}
	settings, err := assembly.SettingsFromEnv(getenv)
	if err != nil {
		return nil, nil, err
	}
	cfg.Security.Apply(&settings)
	base := policytest.BuiltinSnapshot()
	var st cliStore
	if slices.ContainsFunc(cases, func(c *policytest.Case) bool { return c.Protocol.File == "" }) {
		if st, err = openCLIStore(f.store, f.admin, getenv, stderr); err != nil {
			return nil, nil, err
		}
		defer st.Close()
		if base, err = storeSnapshot(ctx, st); err != nil {
			return nil, nil, err
		}
	}
	te := policytest.NewEnv(policytest.Config{Policy: cfg.Policy(), Settings: settings, Limits: cfg.Limits}, base)
	var versions policytest.Versions
	if st != nil {
		versions = st
	}
	return te, te.LoadProtocols(ctx, cases, versions), nil
}

// storeSnapshot reads the active definitions of st: in one read where st is a store, else (the
// admin API) name by name.
func storeSnapshot(ctx context.Context, st cliStore) (store.Snapshot, error) {
	if s, ok := st.(interface {
		Snapshot(context.Context) (store.Snapshot, error)
	}); ok {
		return s.Snapshot(ctx)
	}
	snap := store.Snapshot{Templates: map[string]store.Record{}, Protocols: map[string]store.Record{}}
	for _, kind := range store.Kinds() {
		entries, err := st.List(ctx, kind)
		if err != nil {
			return snap, err
		}
		for _, e := range entries {
			if e.Active == 0 {
				continue
			}
			rec, err := st.Get(ctx, kind, e.Name, e.Active)
			if err != nil {
				return snap, err
			}
			snap.Of(kind)[e.Name] = rec
		}
	}
	return snap, nil
}

// runCases runs the cases in order and prints one line per case as go test does (-v: what was
// decided too); with --junit, the results are also written as JUnit XML.
func runCases(ctx context.Context, te *policytest.Env, cases []*policytest.Case, f *testFlags, stdout io.Writer) error {
	start := time.Now()
	results := make([]*policytest.Result, 0, len(cases))
	failed, bad := 0, 0
	for _, c := range cases {
		if f.verbose {
			fmt.Fprintf(stdout, "=== RUN   %s\n", c.Name)
		}
		r, err := te.Run(ctx, c)
		if err != nil {
			return fmt.Errorf("test: %s: %w", c.Name, err)
		}
		results = append(results, r)
		printResult(stdout, r, f.verbose)
		switch {
		case len(r.Problems) > 0:
			bad++
		case !r.Passed():
			failed++
		}
	}
	took := time.Since(start)
	if f.junit != "" {
		if err := writeJUnit(f.junit, results, took); err != nil {
			return err
		}
	}
	if failed+bad == 0 {
		fmt.Fprintf(stdout, "PASS\nok  \t%d cases\t%s\n", len(cases), elapsed(took))
		return nil
	}
	fmt.Fprintf(stdout, "FAIL\nFAIL\t%d of %d cases\t%s\n", failed+bad, len(cases), elapsed(took))
	if bad > 0 {
		return usageError{fmt.Sprintf("test: %d case(s) are wrong (see the lines above); %d failed", bad, failed)}
	}
	return fmt.Errorf("test: %d of %d cases failed", failed, len(cases))
}

// printResult prints a case's line, and under it why it failed (and, with verbose, what was
// decided).
func printResult(w io.Writer, r *policytest.Result, verbose bool) {
	status := "PASS"
	if !r.Passed() {
		status = "FAIL"
	}
	if verbose {
		for _, d := range r.Details {
			fmt.Fprintf(w, "    %s\n", d)
		}
	}
	fmt.Fprintf(w, "--- %s: %s (%s)\n", status, r.Case.Name, elapsed(r.Took))
	for _, p := range r.Problems {
		fmt.Fprintf(w, "    %s (a mistake of the case)\n", p)
	}
	for _, p := range r.Failures {
		fmt.Fprintf(w, "    %s\n", p)
	}
}

// elapsed formats a case's time as go test does.
func elapsed(d time.Duration) string { return fmt.Sprintf("%.2fs", d.Seconds()) }
