package main

import (
	"context"
	"errors"
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
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/builtin"
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

// testCmd runs `promptgate test [DIR|FILE]...`: the policy test cases of the case files found (*.test.yaml),
// each through the proxy's own handler with no network; or, with --record, writes a case from the decision
// log. Exit status: 0 when every case passed, 1 when one failed, 2 for a bad command line or a bad case.
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
	cases, problems := loadCases(files, filter)
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
	return runCases(ctx, te, cases, f, stdout, stderr)
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

// caseFileRef is a case file found, and the name its cases' names start with.
type caseFileRef struct{ path, name string }

// isCaseFile reports whether name is the name of a case file.
func isCaseFile(name string) bool {
	return slices.ContainsFunc(caseSuffixes, func(s string) bool { return strings.HasSuffix(name, s) && len(name) > len(s) })
}

// caseName is a case file's name under root: its path, with / between folders, without the suffix.
func caseName(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil || rel == "." {
		rel = filepath.Base(path)
	}
	rel = filepath.ToSlash(rel)
	for _, s := range caseSuffixes {
		if trimmed, ok := strings.CutSuffix(rel, s); ok {
			return trimmed
		}
	}
	return strings.TrimSuffix(rel, filepath.Ext(rel))
}

// findCaseFiles lists the case files of each argument: a file is taken as it is; a folder is searched, its
// sub-folders too (but not those whose name starts with a dot), for *.test.yaml and *.test.yml.
func findCaseFiles(roots []string) ([]caseFileRef, error) {
	var out []caseFileRef
	for _, root := range roots {
		info, err := os.Stat(root)
		if err != nil {
			return nil, usageError{fmt.Sprintf("test: %v", err)}
		}
		if !info.IsDir() {
			out = append(out, caseFileRef{path: root, name: caseName(filepath.Dir(root), root)})
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
				out = append(out, caseFileRef{path: path, name: caseName(root, path)})
			}
			return nil
		})
		if err != nil {
			return nil, usageError{fmt.Sprintf("test: %v", err)}
		}
		if len(out) == n {
			return nil, usageError{fmt.Sprintf("test: no case files (*%s) in %s", caseSuffixes[0], root)}
		}
	}
	return out, nil
}

// loadCases reads every case file, and keeps the cases filter matches (all of them when it is nil). Every
// problem of every file is returned: a bad file is bad whether or not its cases are run.
func loadCases(files []caseFileRef, filter *regexp.Regexp) ([]*testCase, []string) {
	var cases []*testCase
	var problems []string
	names := map[string]string{}
	for _, ref := range files {
		f, errs := readCaseFile(ref.path, ref.name)
		problems = append(problems, errs...)
		if f == nil {
			continue
		}
		for _, c := range f.cases {
			if other, dup := names[c.name]; dup {
				problems = append(problems, fmt.Sprintf("%s:%d: %s.name: the case %s of %s has the same full name", c.file, c.line, c.field, c.name, other))
			}
			names[c.name] = c.file
			if filter == nil || filter.MatchString(c.name) {
				cases = append(cases, c)
			}
		}
	}
	return cases, problems
}

// badCases prints the problems of the case files and returns the error of exit status 2.
func badCases(stderr io.Writer, problems []string) error {
	for _, p := range problems {
		fmt.Fprintln(stderr, p)
	}
	return usageError{fmt.Sprintf("test: %d problem(s) in the case files; nothing was run", len(problems))}
}

// newTestEnv reads the config and the protocols the cases name: definition files, and stored versions (the
// store is opened only when a case names one). Problems of the cases are returned, each naming its field.
func newTestEnv(ctx context.Context, f *testFlags, cases []*testCase, stderr io.Writer, getenv env) (*testEnv, []string, error) {
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
	te := &testEnv{cfg: cfg, settings: settings, base: builtinSnapshot(), protocols: map[string]store.Record{}}
	var st cliStore
	if slices.ContainsFunc(cases, func(c *testCase) bool { return c.protocol.file == "" }) {
		if st, err = openCLIStore(f.store, f.admin, getenv, stderr); err != nil {
			return nil, nil, err
		}
		defer st.Close()
		if te.base, err = storeSnapshot(ctx, st); err != nil {
			return nil, nil, err
		}
	}
	var problems []string
	for _, c := range cases {
		key := c.protocol.String()
		if _, done := te.protocols[key]; done {
			continue
		}
		rec, err := loadProtocol(ctx, c.protocol, st)
		if err == nil {
			err = checkProtocolLinks(te.base, rec)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s:%d: %s: %v", c.file, c.protocol.line, c.protocol.field, err))
			te.protocols[key] = store.Record{}
			continue
		}
		te.protocols[key] = rec
	}
	return te, problems, nil
}

// builtinSnapshot is the definitions built into the binary, as a new DB holds them.
func builtinSnapshot() store.Snapshot {
	s := store.Snapshot{Templates: map[string]store.Record{}, Protocols: map[string]store.Record{}}
	for _, d := range builtin.Templates() {
		s.Templates[d.Name] = store.Record{Kind: store.KindTemplate, Name: d.Name, Version: 1, Author: store.BuiltinAuthor, Body: d.Body}
	}
	for _, d := range builtin.Protocols() {
		s.Protocols[d.Name] = store.Record{Kind: store.KindProtocol, Name: d.Name, Version: 1, Author: store.BuiltinAuthor, Body: d.Body}
	}
	return s
}

// storeSnapshot reads the active definitions of st: in one read where st is a store, else (the admin API)
// name by name.
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

// loadProtocol reads the protocol ref names: a definition file, checked as `protocols push` checks it, or a
// version of the store.
func loadProtocol(ctx context.Context, ref protocolRef, st cliStore) (store.Record, error) {
	if ref.file != "" {
		body, err := readLimited(ref.file)
		if err != nil {
			return store.Record{}, err
		}
		name, err := store.CheckStructure(store.KindProtocol, body)
		if err == nil {
			err = proxy.ValidateDefinition(store.KindProtocol, name, body)
		}
		if err != nil {
			return store.Record{}, fmt.Errorf("%s: %w", ref.file, err)
		}
		return store.Record{Kind: store.KindProtocol, Name: name, Note: "file " + ref.file, Body: body}, nil
	}
	var rec store.Record
	var err error
	if ref.version > 0 {
		rec, err = st.Get(ctx, store.KindProtocol, ref.id, ref.version)
	} else {
		rec, err = st.Active(ctx, store.KindProtocol, ref.id)
	}
	if errors.Is(err, store.ErrNotFound) {
		return rec, fmt.Errorf("protocol %s is not in the store (see `promptgate protocols history %s`), or give the definition file: {file: PATH}", ref, ref.id)
	}
	return rec, err
}

// checkProtocolLinks checks rec against the definitions it joins, as the store checks a version it activates
// (a workflow extends a protocol there, one level deep).
func checkProtocolLinks(base store.Snapshot, rec store.Record) error {
	snap := store.Snapshot{Templates: base.Templates, Protocols: map[string]store.Record{}}
	for id, r := range base.Protocols {
		snap.Protocols[id] = r
	}
	snap.Protocols[rec.Name] = rec
	return proxy.CheckLinks(snap, []string{store.Key(store.KindProtocol, rec.Name)})
}

// runCases runs the cases in order and prints one line per case as go test does (-v: what was decided too);
// with --junit, the results are also written as JUnit XML.
func runCases(ctx context.Context, te *testEnv, cases []*testCase, f *testFlags, stdout, stderr io.Writer) error {
	start := time.Now()
	results := make([]*caseResult, 0, len(cases))
	failed, bad := 0, 0
	for _, c := range cases {
		if f.verbose {
			fmt.Fprintf(stdout, "=== RUN   %s\n", c.name)
		}
		t0 := time.Now()
		out, err := te.runCase(ctx, c)
		if err != nil {
			return fmt.Errorf("test: %s: %w", c.name, err)
		}
		r := check(c, out)
		r.took = time.Since(t0)
		results = append(results, r)
		printResult(stdout, r, f.verbose)
		switch {
		case len(r.problems) > 0:
			bad++
		case !r.passed():
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

// printResult prints a case's line, and under it why it failed (and, with verbose, what was decided).
func printResult(w io.Writer, r *caseResult, verbose bool) {
	status := "PASS"
	if !r.passed() {
		status = "FAIL"
	}
	if verbose {
		for _, d := range r.details {
			fmt.Fprintf(w, "    %s\n", d)
		}
	}
	fmt.Fprintf(w, "--- %s: %s (%s)\n", status, r.c.name, elapsed(r.took))
	for _, p := range r.problems {
		fmt.Fprintf(w, "    %s (a mistake of the case)\n", p)
	}
	for _, p := range r.failures {
		fmt.Fprintf(w, "    %s\n", p)
	}
}
