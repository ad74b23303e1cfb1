package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/proxy/telemetry/redact"
	"github.com/promptgate/promptgate/store"
)

// preview prints the preview report of a request read from FILE or stdin — a chat completion, or
// with --path a Responses, Anthropic Messages or Gemini request; it calls no upstream.
func preview(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv env) error {
	fs := flag.NewFlagSet("preview", flag.ContinueOnError)
	protocol := fs.String("protocol", "", "preview under this protocol (operator's choice: routes and client-selection checks are skipped)")
	path := fs.String("path", proxy.PathChat, "the surface: the path the client would POST the request to ("+strings.Join(proxy.PreviewPaths(), ", ")+")")
	var headers headerList
	fs.Var(&headers, "header", "a request header 'Name: value' as the client would send it (repeatable)")
	candidate := fs.String("candidate", "", "preview as if this stored version were active: KIND/NAME@VERSION, KIND protocols or templates (protocols/payments@2)")
	admin := fs.String("admin", "", "admin API URL of a running server (token from "+EnvAdminToken+"); used by itself when serve holds the DB")
	sf := addCLIStoreFlags(fs, getenv)
	args, err := parseFlags(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(args) > 1 {
		return usageError{"preview takes at most one FILE"}
	}
	if !proxy.PreviewPath(*path) {
		return usageError{fmt.Sprintf("--path %q: use one of %s", *path, strings.Join(proxy.PreviewPaths(), ", "))}
	}
	cand, err := parseCandidate(*candidate)
	if err != nil {
		return err
	}
	h := http.Header{}
	for _, s := range headers {
		k, v, err := parseHeader(s)
		if err != nil {
			return err
		}
		h.Add(k, v)
	}
	var body []byte
	if len(args) == 1 && args[0] != "-" {
		body, err = os.ReadFile(args[0])
	} else {
		body, err = io.ReadAll(stdin)
	}
	if err != nil {
		return fmt.Errorf("preview: read request: %w", err)
	}
	log, err := newLogger(stderr, getenv)
	if err != nil {
		return err
	}
	var report []byte
	if *admin == "" {
		report, err = previewLocal(ctx, sf, getenv, log, stderr, proxy.Input{Path: *path, Header: h, Body: body, ForceProtocol: *protocol}, cand)
	}
	if *admin != "" || errors.Is(err, store.ErrLocked) {
		url := *admin
		if url == "" {
			url = fallbackAdminURL(getenv)
			fmt.Fprintf(stderr, "promptgate: %s is held by a running server; using its admin API at %s\n", sf.db, redact.URL(url))
		} else {
			fmt.Fprintf(stderr, "promptgate: using the admin API at %s\n", redact.URL(url))
		}
		a, aerr := newAdminStore(url, getenv(EnvAdminToken))
		if aerr != nil {
			return aerr
		}
		report, err = a.Preview(ctx, body, flatHeaders(h), *protocol, *path, cand)
	}
	if err != nil {
		return fmt.Errorf("preview: %w", err)
	}
	// Printed compact, so that upstreamRequest is byte for byte the body that would be sent (pipe
	// to jq to read it).
	_, err = stdout.Write(append(bytes.TrimRight(report, "\n"), '\n'))
	return err
}

// previewLocal runs the engine on the DB file, with the stored version cand names as if it were
// active (nil: none), and names the store it used on stderr.
func previewLocal(ctx context.Context, sf *storeFlags, getenv env, log *slog.Logger, stderr io.Writer, in proxy.Input,
	cand *candidateRef) ([]byte, error) {
	created, err := checkNewDB(sf, getenv)
	if err != nil {
		return nil, err
	}
	p, err := openPipeline(ctx, sf, false, getenv, log)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	sayStore(stderr, sf, created)
	if int64(len(in.Body)) > p.cfg.Limits.MaxBodyBytes {
		return nil, fmt.Errorf("request is %d bytes, over limits.maxBodyBytes (%d)", len(in.Body), p.cfg.Limits.MaxBodyBytes)
	}
	if cand != nil {
		rec, err := p.store.Get(ctx, cand.kind, cand.name, cand.version)
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("candidate %s is not in the store (see `promptgate %s history %s`)", cand, cand.kind, cand.name)
		}
		if err != nil {
			return nil, fmt.Errorf("candidate %s: %w", cand, err)
		}
		in.Candidate = &rec
	}
	return p.engine.Preview(ctx, in)
}

// candidateRef is a stored version a preview prepares the request with as if it were active.
type candidateRef struct {
	kind    store.Kind
	name    string
	version int
}

func (c candidateRef) String() string {
	return store.Key(c.kind, c.name) + "@" + strconv.Itoa(c.version)
}

// parseCandidate reads --candidate KIND/NAME@VERSION; nil for "".
func parseCandidate(s string) (*candidateRef, error) {
	if s == "" {
		return nil, nil
	}
	bad := func(why string) error {
		return usageError{fmt.Sprintf("--candidate %q: %s; want KIND/NAME@VERSION, KIND protocols or templates (protocols/payments@2)", s, why)}
	}
	kind, rest, ok := strings.Cut(s, "/")
	if !ok {
		return nil, bad("no KIND/")
	}
	k := store.Kind(kind)
	if k != store.KindProtocol && k != store.KindTemplate {
		return nil, bad("KIND is protocols or templates")
	}
	name, v, ok := strings.Cut(rest, "@")
	if !ok {
		return nil, bad("no @VERSION")
	}
	if !store.ValidName(name) {
		return nil, bad("NAME is 1 to 64 of A-Z a-z 0-9 _ . -")
	}
	version, err := strconv.Atoi(v)
	if err != nil || version < 1 || strconv.Itoa(version) != v {
		return nil, bad("VERSION is a number from 1")
	}
	return &candidateRef{kind: k, name: name, version: version}, nil
}

// flatHeaders turns headers into the admin API's {"K":"V"} (the last value of a repeated header
// wins).
func flatHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, vs := range h {
		out[k] = vs[len(vs)-1]
	}
	return out
}
