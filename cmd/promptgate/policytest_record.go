package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/promptgate/promptgate/policy/audit"
	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/config"
	"github.com/promptgate/promptgate/proxy/policytest"
	"github.com/promptgate/promptgate/proxy/telemetry/redact"
)

// recordFlags are the flags of `promptgate test --record`.
type recordFlags struct {
	id     string
	out    string
	path   string
	events string
}

func addRecordFlags(fs *flag.FlagSet, f *recordFlags) {
	fs.StringVar(&f.id, "record", "", "REQUEST_ID: write a case from the decisions the decision log keeps of this request (its X-Request-Id), instead of running cases")
	fs.StringVar(&f.out, "out", "", "with --record: write the case file here instead of to stdout (an existing file is not overwritten)")
	fs.StringVar(&f.path, "path", proxy.PathChat, "with --record: the route the request came on, which the decision log does not keep ("+strings.Join(proxy.PreviewPaths(), ", ")+")")
	fs.StringVar(&f.events, "events", "", "with --record: read the decisions from this file — the JSON lines of the config's audit.file, or an answer of GET /admin/audit — instead of the audit ring")
}

// recordCase writes a case made from the decisions of one request: the protocol version, the tools
// removed and, for each call, its tool, arguments (or their digest) and decision, as the decision
// log keeps them; every other value is a placeholder, and the file says which.
func recordCase(ctx context.Context, f *testFlags, stdout, stderr io.Writer, getenv env) error {
	rf := f.record
	if !proxy.PreviewPath(rf.path) {
		return usageError{fmt.Sprintf("--path %q: use one of %s", rf.path, strings.Join(proxy.PreviewPaths(), ", "))}
	}
	if rf.out != "" {
		if _, err := os.Stat(rf.out); err == nil {
			return usageError{fmt.Sprintf("--out %s: the file exists; give another name, or remove it first", rf.out)}
		}
	}
	events, source, err := recordedEvents(ctx, f, stderr, getenv)
	if err != nil {
		return fmt.Errorf("test --record: %w", err)
	}
	rec, err := policytest.NewRecording(rf.id, rf.path, events)
	if err != nil {
		return fmt.Errorf("test --record: %s: %w", source, err)
	}
	out, err := rec.YAML("`promptgate test --record "+rf.id+"`", source, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("test --record: %w", err)
	}
	if rf.out == "" {
		_, err = stdout.Write(out)
		return err
	}
	if err := os.WriteFile(rf.out, out, 0o644); err != nil {
		return fmt.Errorf("test --record: %w", err)
	}
	fmt.Fprintf(stderr, "promptgate: wrote %s; fill in its placeholders (see the comment at its top), then run: promptgate test %s\n", rf.out, rf.out)
	return nil
}

// recordedEvents are the events of the request, oldest first, and where they were read: --events,
// the admin API (--admin, or the server that holds the ring), or the audit ring file next to the
// store.
func recordedEvents(ctx context.Context, f *testFlags, stderr io.Writer, getenv env) ([]audit.Event, string, error) {
	id := f.record.id
	if f.record.events != "" {
		evs, err := eventsFile(f.record.events, id)
		return evs, f.record.events, err
	}
	admin := f.admin
	if admin == "" {
		cfg, err := config.Load(f.store.config)
		if err != nil {
			return nil, "", err
		}
		ring := cfg.Audit.Path
		if ring == "" {
			ring = defaultAuditPath(f.store, orEnv(getenv, EnvStoreSnapshot, DefaultStoreSnapshot))
		}
		evs, err := audit.QueryFile(ctx, ring, audit.Filter{RequestID: id, Limit: audit.MaxQueryLimit})
		switch {
		case err == nil:
			slices.Reverse(evs)
			return evs, "the audit ring " + absPath(ring), nil
		case errors.Is(err, fs.ErrNotExist):
			return nil, "", fmt.Errorf("%w: give the --db (or --config with audit.path) of the server that decided it, --admin the URL of its admin API, or --events a file of its decisions", err)
		case !errors.Is(err, audit.ErrLocked):
			return nil, "", err
		}
		admin = fallbackAdminURL(getenv)
		fmt.Fprintf(stderr, "promptgate: %s is held by a running server; using its admin API at %s\n", ring, redact.URL(admin))
	}
	a, err := newAdminStore(admin, getenv(EnvAdminToken))
	if err != nil {
		return nil, "", err
	}
	var page struct {
		Events []audit.Event `json:"events"`
	}
	q := "/admin/audit?limit=" + strconv.Itoa(audit.MaxQueryLimit) + "&requestId=" + url.QueryEscape(id)
	if err := a.call(ctx, "GET", q, nil, &page); err != nil {
		return nil, "", err
	}
	slices.Reverse(page.Events)
	return page.Events, "the admin API at " + redact.URL(admin), nil
}

// eventsFile reads the events of request id from a file: JSON lines (audit.file; oldest first), or
// the admin API's {"events": [...]} (newest first).
func eventsFile(path, id string) ([]audit.Event, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var all []audit.Event
	if page := bytes.TrimSpace(b); bytes.HasPrefix(page, []byte(`{"events"`)) {
		var p struct {
			Events []audit.Event `json:"events"`
		}
		if err := json.Unmarshal(page, &p); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		all = p.Events
		slices.Reverse(all)
	} else {
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 64<<20)
		for n := 1; sc.Scan(); n++ {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			var e audit.Event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				return nil, fmt.Errorf("%s:%d: not a decision event: %w", path, n, err)
			}
			all = append(all, e)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return slices.DeleteFunc(all, func(e audit.Event) bool { return e.RequestID != id }), nil
}
