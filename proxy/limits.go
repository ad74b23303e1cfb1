package proxy

import (
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Defaults of Limits.
const (
	DefaultMaxBodyBytes    = 10 << 20
	DefaultMaxJSONDepth    = 64
	DefaultUpstreamTimeout = 120 * time.Second
	// DefaultBodyReadTimeout bounds the arrival of a whole request body.
	DefaultBodyReadTimeout = 60 * time.Second
	// DefaultHeaderReadTimeout bounds the arrival of a request's headers, from its first byte (or
	// from the connection's opening).
	DefaultHeaderReadTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection that sends no new request for that long.
	DefaultIdleTimeout = 120 * time.Second
	// DefaultMaxInFlight caps the requests a listener serves at once.
	DefaultMaxInFlight = 1024
	// DefaultMaxTools caps the tools one request declares (OpenAI takes at most 128).
	DefaultMaxTools = 1024
)

// Limits bound what one request may cost, and how long a listener waits for its parts (the config's
// limits section). The zero value means every default.
type Limits struct {
	// MaxBodyBytes caps a request body; larger bodies get 413 body_too_large. 0 means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64 `yaml:"maxBodyBytes"`
	// MaxJSONDepth caps nesting of request bodies and tool-call arguments. 0 means
	// DefaultMaxJSONDepth.
	MaxJSONDepth int `yaml:"maxJSONDepth"`
	// UpstreamTimeout bounds the wait for the upstream's response headers, and each silent gap in a
	// streamed body. 0 means DefaultUpstreamTimeout.
	UpstreamTimeout time.Duration `yaml:"upstreamTimeout"`
	// BodyReadTimeout bounds the arrival of a whole request body, from the end of its headers (408
	// request_timeout past it); it never bounds the answer. 0 means DefaultBodyReadTimeout.
	BodyReadTimeout time.Duration `yaml:"bodyReadTimeout"`
	// HeaderReadTimeout bounds the arrival of a request's headers; the connection is closed past
	// it. 0 means DefaultHeaderReadTimeout.
	HeaderReadTimeout time.Duration `yaml:"headerReadTimeout"`
	// IdleTimeout closes a keep-alive connection that sends no new request for that long. 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration `yaml:"idleTimeout"`
	// MaxInFlight caps the requests a listener serves at once (streams included, health checks
	// not); past it a request gets 503 overloaded with Retry-After. 0 means DefaultMaxInFlight.
	MaxInFlight int `yaml:"maxInFlight"`
	// MaxTools caps the tools one request declares (each can be a decision event); past it the
	// request gets 400 invalid_request. 0 means DefaultMaxTools.
	MaxTools int `yaml:"maxTools"`
}

// ApplyDefaults fills every zero limit with its default.
func (l *Limits) ApplyDefaults() {
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if l.MaxJSONDepth == 0 {
		l.MaxJSONDepth = DefaultMaxJSONDepth
	}
	if l.UpstreamTimeout == 0 {
		l.UpstreamTimeout = DefaultUpstreamTimeout
	}
	if l.BodyReadTimeout == 0 {
		l.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if l.HeaderReadTimeout == 0 {
		l.HeaderReadTimeout = DefaultHeaderReadTimeout
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	if l.MaxTools == 0 {
		l.MaxTools = DefaultMaxTools
	}
}

// Validate returns every problem of the limits, each naming its key path under key (the section's
// own key, e.g. "limits") and the fix.
func (l *Limits) Validate(key string) []error {
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", key, k, fmt.Sprintf(format, args...)))
	}
	if l.MaxBodyBytes < 0 {
		bad("maxBodyBytes", "must be positive, e.g. 10485760")
	}
	if l.MaxJSONDepth < 0 || l.MaxJSONDepth > 10000 {
		bad("maxJSONDepth", "must be between 1 and 10000, e.g. 64")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
		eg  string
	}{
		{"upstreamTimeout", l.UpstreamTimeout, "120s"},
		{"bodyReadTimeout", l.BodyReadTimeout, "60s"},
		{"headerReadTimeout", l.HeaderReadTimeout, "10s"},
		{"idleTimeout", l.IdleTimeout, "120s"},
	} {
		if d.v < 0 {
			bad(d.key, "must be positive, e.g. %s", d.eg)
		}
	}
	if l.MaxInFlight < 0 {
		bad("maxInFlight", "must be positive, e.g. 1024")
	}
	if l.MaxTools < 0 {
		bad("maxTools", "must be positive, e.g. 1024")
	}
	return errs
}

// HTTPServer is the HTTP server of a listener serving h under l's header-read and idle timeouts.
// The proxy listener bounds the reading of each request's body itself (BodyReadTimeout, cleared
// once the body is in, so that a long stream is never cut), as do the HTTPS-proxy door's tunnels;
// with wholeRequest (the admin listener, whose answers are short) the server bounds headers and
// body together instead.
func (l Limits) HTTPServer(h http.Handler, wholeRequest bool, log *slog.Logger) *http.Server {
	hs := &http.Server{Handler: h, ReadHeaderTimeout: l.HeaderReadTimeout, IdleTimeout: l.IdleTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	if wholeRequest {
		hs.ReadTimeout = l.HeaderReadTimeout + l.BodyReadTimeout
	}
	return hs
}
