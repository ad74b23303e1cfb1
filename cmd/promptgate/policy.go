package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/policy/learn"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/proxy/telemetry/redact"
	"github.com/promptgate/promptgate/store"
)

// policyCmd runs `promptgate policy suggest NAME [--since D]`: a proposed version of protocol NAME
// from what learn mode learned of it, as a definition file (stdout or --out) and a report of each
// proposal with its evidence (stderr or --report). While serve holds the files it asks the admin
// API.
func policyCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env) error {
	if len(args) == 0 || args[0] != "suggest" {
		return usageError{"policy: give suggest NAME [--since 24h] [--out FILE] [--report FILE]"}
	}
	fs := flag.NewFlagSet("policy suggest", flag.ContinueOnError)
	since := fs.String("since", "24h", "the window learned from: a duration such as 24h or 90m, at most "+learn.DefaultRetention.String())
	out := fs.String("out", "", "write the proposed definition to FILE instead of stdout")
	report := fs.String("report", "", "write the report of the proposals to FILE instead of stderr")
	learnFile := fs.String("learn", "", "learn mode's file (default: next to the audit ring of the --db or the config's audit.path)")
	admin := fs.String("admin", "", "admin API URL of a running server (token from "+EnvAdminToken+"); used by itself when serve holds the files")
	sf := addStoreFlags(fs, getenv)
	pos, err := parseFlags(fs, args[1:], stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{fmt.Sprintf("policy suggest takes the protocol's name, got %d argument(s)", len(pos))}
	}
	d, err := time.ParseDuration(*since)
	if err != nil || d <= 0 || d > learn.DefaultRetention {
		return usageError{fmt.Sprintf("policy suggest: --since %q: give a duration such as 24h or 90m, more than 0 and at most %s", *since, learn.DefaultRetention)}
	}
	var sg learn.Suggestion
	if *admin != "" {
		sg, err = suggestByAdmin(ctx, *admin, getenv(EnvAdminToken), pos[0], *since, stderr)
	} else {
		sg, err = suggestLocal(ctx, sf, *learnFile, pos[0], d, getenv, stderr)
	}
	if err != nil {
		return err
	}
	return writeSuggestion(sg, *out, *report, stdout, stderr)
}

// suggestLocal reads the learn file and the store; when serve holds the learn file, it asks its
// admin API.
func suggestLocal(ctx context.Context, sf *storeFlags, file, name string, since time.Duration, getenv env, stderr io.Writer) (learn.Suggestion, error) {
	if file == "" {
		cfg, err := config.Load(sf.config)
		if err != nil {
			return learn.Suggestion{}, err
		}
		ring := cfg.Audit.Path
		if ring == "" {
			ring = defaultAuditPath(sf, orEnv(getenv, EnvStoreSnapshot, DefaultStoreSnapshot))
		}
		file = learnPath(ring)
	}
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		return learn.Suggestion{}, fmt.Errorf("policy suggest: no learn file at %s: serve keeps it next to its audit ring while a protocol runs in audit mode or has a version in shadow; give --learn FILE or --admin URL", file)
	}
	ls, err := learn.Open(file, learn.Options{ReadOnly: true})
	if err != nil {
		if strings.Contains(err.Error(), "locked") {
			admin := fallbackAdminURL(getenv)
			fmt.Fprintf(stderr, "promptgate: %s is held by a running server; using its admin API at %s\n", file, redact.URL(admin))
			return suggestByAdmin(ctx, admin, getenv(EnvAdminToken), name, since.String(), stderr)
		}
		return learn.Suggestion{}, err
	}
	defer ls.Close()
	st, err := openCLIStore(&storeFlags{db: sf.db, store: sf.store, config: sf.config}, "", getenv, stderr)
	if err != nil {
		return learn.Suggestion{}, err
	}
	defer st.Close()
	rec, err := st.Active(ctx, store.KindProtocol, name)
	if err != nil {
		return learn.Suggestion{}, fmt.Errorf("policy suggest: %w", err)
	}
	l, err := ls.Window(ctx, name, time.Now().Add(-since))
	if err != nil {
		return learn.Suggestion{}, err
	}
	fmt.Fprintf(stderr, "promptgate: using learn file %s\n", file)
	return learn.Suggest(rec.Body, rec.Version, l, learn.SuggestOptions{})
}

// suggestByAdmin asks GET /admin/protocols/NAME/suggest.
func suggestByAdmin(ctx context.Context, admin, token, name, since string, stderr io.Writer) (learn.Suggestion, error) {
	a, err := newAdminStore(admin, token)
	if err != nil {
		return learn.Suggestion{}, err
	}
	fmt.Fprintf(stderr, "promptgate: using the admin API at %s\n", redact.URL(admin))
	var data []byte
	path := defsPath(store.KindProtocol, name, "suggest") + "?since=" + url.QueryEscape(since)
	if err := a.call(ctx, http.MethodGet, path, nil, &data); err != nil {
		return learn.Suggestion{}, fmt.Errorf("policy suggest: %w", err)
	}
	var sg learn.Suggestion
	if err := json.Unmarshal(data, &sg); err != nil {
		return sg, fmt.Errorf("policy suggest: the admin API's answer: %w", err)
	}
	root := gjson.ParseBytes(data)
	sg.Definition = []byte(root.Get("definition").Raw)
	sg.Learned.Protocol, sg.Learned.Requests = name, int(root.Get("requests").Int())
	if t, err := time.Parse(time.RFC3339Nano, root.Get("since").String()); err == nil {
		sg.Learned.Since = t
	}
	if t, err := time.Parse(time.RFC3339Nano, root.Get("until").String()); err == nil {
		sg.Learned.Until = t
	}
	return sg, nil
}

// writeSuggestion writes the definition, indented, and the report.
func writeSuggestion(sg learn.Suggestion, out, report string, stdout, stderr io.Writer) error {
	var def bytes.Buffer
	if err := json.Indent(&def, sg.Definition, "", "  "); err != nil {
		return fmt.Errorf("policy suggest: the proposal: %w", err)
	}
	def.WriteByte('\n')
	if out == "" {
		if _, err := stdout.Write(def.Bytes()); err != nil {
			return err
		}
	} else if err := os.WriteFile(out, def.Bytes(), 0o644); err != nil {
		return fmt.Errorf("policy suggest: %w", err)
	}
	var rep bytes.Buffer
	writeReport(&rep, sg, out)
	if report == "" {
		_, err := stderr.Write(rep.Bytes())
		return err
	}
	if err := os.WriteFile(report, rep.Bytes(), 0o644); err != nil {
		return fmt.Errorf("policy suggest: %w", err)
	}
	return nil
}

// writeReport writes one line per proposal: what it changes, its evidence and what it would have
// blocked.
func writeReport(w io.Writer, sg learn.Suggestion, out string) {
	l := sg.Learned
	fmt.Fprintf(w, "proposal for protocol %s, based on version %d, learned from %d requests between %s and %s:\n", sg.Protocol, sg.Version, l.Requests,
		l.Since.UTC().Format(time.RFC3339), l.Until.UTC().Format(time.RFC3339))
	if len(sg.Proposals) == 0 {
		fmt.Fprintln(w, "  nothing to propose: the active version already governs what was learned")
	}
	for _, p := range sg.Proposals {
		line := "  " + p.Kind
		if p.Rule != "" {
			line += " " + p.Rule
		}
		line += ": " + p.Text
		if p.Evidence.Calls > 0 {
			line += fmt.Sprintf("; evidence: %s", countText(p.Evidence))
		}
		if p.Kind != "allow" && p.Kind != "onViolation" && p.Kind != "trustedPaths" {
			line += "; would have blocked " + countText(p.WouldBlock)
			if len(p.WouldBlock.Requests) > 0 {
				line += " (requests " + strings.Join(p.WouldBlock.Requests, ", ") + ")"
			}
		}
		fmt.Fprintln(w, line)
	}
	next := "the file"
	if out != "" {
		next = out
	}
	fmt.Fprintf(w, "next: edit %s, test it, push it (promptgate protocols push), shadow it (promptgate protocols shadow %s VERSION), then activate it\n",
		next, sg.Protocol)
}

// countText is "N calls in M conversations".
func countText(c learn.Count) string {
	at := ""
	if c.AtLeast {
		at = "at least "
	}
	return fmt.Sprintf("%d calls in %s%d conversations", c.Calls, at, c.Conversations)
}
