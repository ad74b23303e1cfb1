package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/promptgate/promptgate/proxy"
)

// preview prints the preview report of a chat request read from FILE or stdin; it calls no upstream.
func preview(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv env) error {
	fs := flag.NewFlagSet("preview", flag.ContinueOnError)
	protocol := fs.String("protocol", "", "preview under this protocol (operator's choice: routes and client-selection checks are skipped)")
	var headers headerList
	fs.Var(&headers, "header", "a request header 'Name: value' as the client would send it (repeatable)")
	sf := addStoreFlags(fs, getenv)
	args, err := parseFlags(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(args) > 1 {
		return usageError{"preview takes at most one FILE"}
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
	p, err := openPipeline(ctx, sf, false, getenv, log)
	if err != nil {
		return err
	}
	defer p.Close()
	if int64(len(body)) > p.cfg.Limits.MaxBodyBytes {
		return fmt.Errorf("preview: request is %d bytes, over limits.maxBodyBytes (%d)", len(body), p.cfg.Limits.MaxBodyBytes)
	}
	report, err := p.engine.Preview(ctx, proxy.Input{Path: proxy.PathChat, Header: h, Body: body, ForceProtocol: *protocol})
	if err != nil {
		return fmt.Errorf("preview: %w", err)
	}
	// Printed compact, so that upstreamRequest is byte for byte the body that would be sent (pipe to jq to read it).
	_, err = stdout.Write(append(report, '\n'))
	return err
}
