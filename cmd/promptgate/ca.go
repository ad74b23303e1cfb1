package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/promptgate/promptgate/proxy/mitm"
)

// DefaultCADir is where `ca init` writes the CA when --out is not given.
const DefaultCADir = "promptgate-ca"

// ca runs `promptgate ca init [--out DIR] [--force]`.
func ca(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "init" {
		return usageError{"ca: the only subcommand is init: promptgate ca init [--out DIR] [--force]"}
	}
	fs := flag.NewFlagSet("ca init", flag.ContinueOnError)
	out := fs.String("out", DefaultCADir, "folder for ca.crt and ca.key (created if needed)")
	force := fs.Bool("force", false, "replace an existing CA (clients must then trust the new one)")
	pos, err := parseFlags(fs, args[1:], stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("ca init takes no arguments, got %q", pos)}
	}
	certPath, keyPath, err := mitm.WriteCA(*out, *force)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, `wrote %s (certificate) and %s (private key, mode 0600; keep it secret)

Point promptgate at it in the config file:
  mitm: {caCert: %s, caKey: %s, hosts: [api.openai.com], passthrough: true}
and start: promptgate serve --config FILE --proxy-listen 127.0.0.1:8789

Make the clients trust it (only the processes that should go through promptgate):
  export HTTPS_PROXY=http://127.0.0.1:8789
  export SSL_CERT_FILE=%s            # Go, curl, OpenSSL-based tools (replaces the system roots: see docs/apps.md)
  export NODE_EXTRA_CA_CERTS=%s      # Node.js
  export REQUESTS_CA_BUNDLE=%s       # Python requests / httpx (use a bundle that also holds the system roots)
  OS store: Debian/Ubuntu: sudo cp %s /usr/local/share/ca-certificates/promptgate.crt && sudo update-ca-certificates
            macOS: sudo security add-trusted-cert -d -r trustRoot -k /Library/Keychains/System.keychain %s
`, certPath, keyPath, certPath, keyPath, certPath, certPath, certPath, certPath, certPath)
	return nil
}
