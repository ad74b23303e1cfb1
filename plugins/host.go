package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/promptgate/promptgate/assembly/ctxjson"
	"github.com/promptgate/promptgate/plugins/gather"
	"github.com/promptgate/promptgate/plugins/internal/answer"
	"github.com/promptgate/promptgate/plugins/sdk"
)

// ErrRequiredFailed is wrapped by the error of Gather when a source with required: true failed;
// the proxy answers such a request 503 context_unavailable.
var ErrRequiredFailed = errors.New("required context source failed")

// Reasons written to meta.skipped for a source that did not contribute. Others are
// "error: <the plugin's message>" (cut to maxErrorChars), "answer too large (over N bytes)" and
// "invalid answer: <problem>" (see sdk.AnswerError).
const (
	// ReasonModuleOff: the protocol's scope switches the source's module off.
	ReasonModuleOff = "module off"
	// ReasonTimeout: the source did not answer within its timeout.
	ReasonTimeout = "timeout"
	// ReasonUnavailable: the plugin process is down (crashed, restarting, or the host is closed).
	ReasonUnavailable = "unavailable"
	// ReasonCanceled: the request itself went away before the source answered.
	ReasonCanceled = "canceled"
)

// maxErrorChars caps the plugin's own message in an "error: ..." reason.
const maxErrorChars = 120

// Classes of a source call that gave no answer: a small fixed set, whatever the plugin said, for
// metric labels and trace attributes (the reason's text, which may quote the plugin's own message,
// goes to meta.skipped and the log only).
const (
	// ClassTimeout: the source did not answer within its timeout.
	ClassTimeout = "timeout"
	// ClassUnavailable: the plugin process is down.
	ClassUnavailable = "unavailable"
	// ClassCanceled: the request went away before the source answered.
	ClassCanceled = "canceled"
	// ClassError: the plugin answered with an error of its own.
	ClassError = "error"
	// ClassTooLarge: the answer was over the size cap.
	ClassTooLarge = "too_large"
	// ClassBadAnswer: the answer was not a valid answer (not JSON, invalid UTF-8, fields not an
	// object, ...).
	ClassBadAnswer = "bad_answer"
)

// Defaults of HostOptions.
const (
	DefaultMaxAnswerBytes    = sdk.DefaultMaxAnswerBytes
	DefaultStartTimeout      = 10 * time.Second
	DefaultRestartBackoff    = 100 * time.Millisecond
	DefaultMaxRestartBackoff = 30 * time.Second
	DefaultHealthInterval    = time.Second
	DefaultCacheMaxBytes     = 32 << 20
)

// HostOptions tune the host. The zero value is usable.
type HostOptions struct {
	// Logger receives start, stop, crash and failure events and the plugins' own stderr lines
	// (debug). Request data and answers are never logged. Nil discards.
	Logger *slog.Logger
	// MaxAnswerBytes caps one answer of one source (the whole answer envelope). Larger answers
	// are refused as they arrive, from gRPC's length prefix, before they are read, and the
	// source is skipped with "answer too large (over N bytes)". Zero or negative means
	// DefaultMaxAnswerBytes (256 KiB).
	MaxAnswerBytes int
	// StartTimeout bounds one start of one plugin: process start, handshake, Describe and
	// Configure. Zero or negative means DefaultStartTimeout.
	StartTimeout time.Duration
	// RestartBackoff is the wait before the first restart of a crashed plugin; it doubles with
	// each further failure, up to MaxRestartBackoff, and starts over once the plugin has stayed up
	// for MaxRestartBackoff. Zero or negative means the defaults (100ms, 30s).
	RestartBackoff, MaxRestartBackoff time.Duration
	// HealthInterval is how often the host looks for plugin processes that exited between
	// requests (a failed call makes it look at once). Zero or negative means DefaultHealthInterval.
	HealthInterval time.Duration
	// CacheMaxBytes bounds the answer cache (the sum of cached answer sizes). Zero means
	// DefaultCacheMaxBytes (32 MiB); negative turns caching off for every source.
	CacheMaxBytes int64
	// Trace opens the span of one source's call (promptgate.context.source) when the request in ctx
	// is traced, and returns a nil span when it is not; nil means no spans. serve passes the
	// proxy's tracing.
	Trace func(ctx context.Context) (context.Context, SourceSpan)
}

// SourceSpan is the span of one context source's call: the source's name and, when skipped, why.
type SourceSpan interface {
	String(key, value string)
	Error(code string)
	End()
}

func (o *HostOptions) applyDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxAnswerBytes <= 0 {
		o.MaxAnswerBytes = DefaultMaxAnswerBytes
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.RestartBackoff <= 0 {
		o.RestartBackoff = DefaultRestartBackoff
	}
	if o.MaxRestartBackoff <= 0 {
		o.MaxRestartBackoff = DefaultMaxRestartBackoff
	}
	o.MaxRestartBackoff = max(o.MaxRestartBackoff, o.RestartBackoff)
	if o.HealthInterval <= 0 {
		o.HealthInterval = DefaultHealthInterval
	}
	if o.CacheMaxBytes == 0 {
		o.CacheMaxBytes = DefaultCacheMaxBytes
	}
}

// Host runs the configured context sources. Its methods are safe for concurrent use.
type Host struct {
	log   *slog.Logger
	opts  HostOptions
	slots []*slot
	cache *answerCache // nil: no caching

	life   context.Context // ends with Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // supervisors
	once   sync.Once

	observer atomic.Pointer[Observer]
}

// Observer is told of every source call made for a request (not of answers from the cache): the
// source's name, how long it took and, when it gave no answer, the class of the failure (one of the
// Class constants; "" for an answer). It must be quick and safe for concurrent use.
type Observer func(source string, took time.Duration, class string)

// Observe sets the observer of every later source call (metrics, typically); nil removes it.
func (h *Host) Observe(o Observer) {
	if o == nil {
		h.observer.Store(nil)
		return
	}
	h.observer.Store(&o)
}

// NewHost checks and starts every configured plugin, in parallel, and returns once each has
// been started or has failed its first start. It refuses (returns an error, having started
// nothing or stopped what it started) when a binary is missing or its sha256 differs from the
// entry's (the error names the plugin and both checksums), when an entry is invalid, or when a
// required plugin fails to start. An optional plugin that fails to start is logged and retried in
// the background with backoff; until then it is skipped as "unavailable".
//
// ctx bounds the first start only; the plugins run until Close.
func NewHost(ctx context.Context, cfg []Spec, opts HostOptions) (*Host, error) {
	opts.applyDefaults()
	h := &Host{log: opts.Logger, opts: opts}
	var errs []error
	caching := false
	for _, p := range cfg {
		s, err := newSlot(p, h.log)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		caching = caching || p.CacheTTL > 0
		h.slots = append(h.slots, s)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if caching && opts.CacheMaxBytes > 0 {
		c, err := newAnswerCache(opts.CacheMaxBytes)
		if err != nil {
			return nil, fmt.Errorf("plugins: cache: %w", err)
		}
		h.cache = c
	}
	h.life, h.cancel = context.WithCancel(context.WithoutCancel(ctx))

	startErrs := make([]error, len(h.slots))
	var wg sync.WaitGroup
	for i, s := range h.slots {
		wg.Go(func() { startErrs[i] = h.start(ctx, s) })
	}
	wg.Wait()
	for i, s := range h.slots {
		if err := startErrs[i]; err != nil {
			if s.cfg.Required {
				errs = append(errs, err)
				continue
			}
			s.setDown("not started: " + err.Error())
			h.log.Error("context source failed to start; retrying in the background", "plugin", s.cfg.Name, "err", err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		_ = h.Close()
		return nil, err
	}
	for _, s := range h.slots {
		h.wg.Go(func() { h.supervise(s) })
	}
	return h, nil
}

// Ready reports whether every required plugin is up; when not, the reason names the first one
// that is down. It is false after Close.
func (h *Host) Ready() (bool, string) {
	if h.life.Err() != nil {
		return false, "context sources closed"
	}
	for _, s := range h.slots {
		if !s.cfg.Required {
			continue
		}
		if down := s.downReason(); down != "" {
			return false, fmt.Sprintf("required context source %q is down: %s", s.cfg.Name, down)
		}
	}
	return true, ""
}

// SourceStatus is the state of one configured context source, for the admin API's health report.
type SourceStatus struct {
	Name     string `json:"name"`
	Module   string `json:"module"`
	Required bool   `json:"required"`
	// Up is true while a process serves the source; Down then is "", else it says why it is down.
	Up   bool   `json:"up"`
	Down string `json:"down,omitempty"`
	// UpSince is when the current process started (zero while down).
	UpSince time.Time `json:"upSince,omitzero"`
	// Restarts counts the processes started after the first one (crashes recovered).
	Restarts int `json:"restarts"`
}

// Status reports every configured source, in config order.
func (h *Host) Status() []SourceStatus {
	out := make([]SourceStatus, len(h.slots))
	for i, s := range h.slots {
		s.mu.RLock()
		out[i] = SourceStatus{Name: s.cfg.Name, Module: s.cfg.Module, Required: s.cfg.Required,
			Up: s.src != nil, Down: s.down, Restarts: s.restarts}
		if s.src != nil {
			out[i].UpSince = s.upSince
		}
		s.mu.RUnlock()
	}
	return out
}

// Close stops every plugin process (gracefully, then by force after two seconds) and waits for
// the host's goroutines. Gather keeps working after Close, every source then being unavailable.
func (h *Host) Close() error {
	h.once.Do(func() {
		h.cancel()
		h.wg.Wait()
		var wg sync.WaitGroup
		for _, s := range h.slots {
			wg.Go(s.stop)
		}
		wg.Wait()
		if h.cache != nil {
			h.cache.close()
		}
	})
	return nil
}

// outcome is what one source did for one request.
type outcome struct {
	ran    bool
	answer *answer.Answer
	reason string // why there is no answer, for meta.skipped
	class  string // the reason's Class constant ("" for module off)
	cached bool   // the answer came from the cache
}

// Gather asks every source the request's mode reaches, in parallel, each under its own timeout,
// and returns what they said in config order. The error is non-nil only when a required source
// failed; it wraps ErrRequiredFailed and names the source and the reason. The Result is filled
// either way.
//
// Answers found in the cache are taken at once, on the caller's goroutine; of the sources that
// must be called, all but one are called on goroutines of their own and the last on the caller's,
// so that a request whose sources are all cached (or that calls just one) starts no goroutine and
// waits for no other.
func (h *Host) Gather(ctx context.Context, q gather.Query) (gather.Result, error) {
	outs := make([]outcome, len(h.slots))
	var calls []int
	for i, s := range h.slots {
		if !q.Mode.AtLeast(s.cfg.MinMode) {
			continue // below the request's mode: absent, not skipped
		}
		outs[i].ran = true
		if moduleOff(s.cfg.Module, q.ModulesOff) {
			outs[i].reason = ReasonModuleOff
			continue
		}
		if a := h.tracedHit(ctx, s, q); a != nil {
			outs[i] = outcome{ran: true, answer: a, cached: true}
			continue
		}
		calls = append(calls, i)
	}
	call := func(i int) {
		s := h.slots[i]
		start := time.Now()
		outs[i] = h.tracedAsk(ctx, s, q)
		if o := h.observer.Load(); o != nil && !outs[i].cached {
			(*o)(s.cfg.Name, time.Since(start), outs[i].class)
		}
	}
	if n := len(calls); n > 0 {
		var wg sync.WaitGroup
		for _, i := range calls[:n-1] {
			wg.Go(func() { call(i) })
		}
		call(calls[n-1])
		wg.Wait()
	}

	var res gather.Result
	var errs []error
	for i, s := range h.slots {
		o := outs[i]
		switch {
		case !o.ran:
			continue
		case o.answer == nil:
			res.Skipped = append(res.Skipped, ctxjson.Skip{Source: s.cfg.Name, Reason: o.reason})
			if s.cfg.Required && o.reason != ReasonModuleOff {
				errs = append(errs, fmt.Errorf("plugins: source %q: %s: %w", s.cfg.Name, o.reason, ErrRequiredFailed))
			}
			continue
		}
		res.Sources = append(res.Sources, ctxjson.Source{Name: s.cfg.Name, Value: o.answer.Fields})
		if s.cfg.TrustedDirectives {
			res.Directives = append(res.Directives, o.answer.Directives...)
		}
		if len(o.answer.Notes) > 0 {
			if res.Notes == nil {
				res.Notes = map[string][]string{}
			}
			res.Notes[s.cfg.Name] = o.answer.Notes
		}
		for _, l := range s.cfg.Lists {
			if entries := listEntries(o.answer.Fields.Get(l)); len(entries) > 0 {
				if res.Lists == nil {
					res.Lists = map[string][]string{}
				}
				res.Lists[l] = append(res.Lists[l], entries...)
			}
		}
	}
	return res, errors.Join(errs...)
}

// request is what a source is told about q.
func request(s *slot, q gather.Query) sdk.Request {
	req := sdk.Request{
		Protocol: q.Protocol, BaseProtocol: q.BaseProtocol, Workflow: q.Workflow,
		Mode: q.Mode, User: q.User, Conversation: q.Conversation, Model: q.Model,
	}
	if s.cfg.ReceiveUserMessage {
		req.LatestUser = q.LatestUser
	}
	return req
}

// caches reports whether the source's answers are cached.
func (h *Host) caches(s *slot) bool { return h.cache != nil && s.cfg.CacheTTL > 0 }

// hit is the source's cached answer for q, or nil.
func (h *Host) hit(s *slot, q gather.Query) *answer.Answer {
	if !h.caches(s) {
		return nil
	}
	if a, ok := h.cache.get(cacheKey(s.cfg.Name, request(s, q))); ok {
		return a
	}
	return nil
}

// ask gets one source's answer from the plugin under the source's timeout (Gather has looked in the
// cache already), and caches it when the source's answers are cached.
func (h *Host) ask(ctx context.Context, s *slot, q gather.Query) outcome {
	req := request(s, q)
	src := s.source()
	if src == nil {
		return outcome{ran: true, reason: ReasonUnavailable, class: ClassUnavailable}
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	raw, err := src.Gather(cctx, req)
	var a answer.Answer
	if err == nil {
		a, err = answer.Decode(raw, src.MaxAnswer())
	}
	if err != nil {
		reason, class := h.reason(ctx, cctx, s, err)
		h.log.Warn("context source skipped", "plugin", s.cfg.Name, "class", class, "reason", reason)
		return outcome{ran: true, reason: reason, class: class}
	}
	if h.caches(s) {
		h.cache.set(cacheKey(s.cfg.Name, req), &a, s.cfg.CacheTTL)
	}
	return outcome{ran: true, answer: &a}
}

// reason turns a failed call into the text for meta.skipped and its class. The text never includes
// host-side details (paths, addresses, TLS errors); only the plugin's own error message, cut short.
func (h *Host) reason(ctx, cctx context.Context, s *slot, err error) (reason, class string) {
	var ae *sdk.AnswerError
	if errors.As(err, &ae) {
		if ae.TooLarge {
			return ae.Reason(), ClassTooLarge
		}
		return ae.Reason(), ClassBadAnswer
	}
	if ctx.Err() != nil {
		return ReasonCanceled, ClassCanceled
	}
	st, _ := status.FromError(err)
	switch {
	case errors.Is(cctx.Err(), context.DeadlineExceeded), st.Code() == codes.DeadlineExceeded:
		return ReasonTimeout, ClassTimeout
	case st.Code() == codes.Unavailable, st.Code() == codes.Canceled:
		// The connection broke: most likely the process died. Let the supervisor look now.
		s.pokeSupervisor()
		return ReasonUnavailable, ClassUnavailable
	}
	msg := strings.TrimSpace(strings.ToValidUTF8(st.Message(), "\uFFFD"))
	if utf8.RuneCountInString(msg) > maxErrorChars {
		msg = string([]rune(msg)[:maxErrorChars-1]) + "…"
	}
	if msg == "" {
		msg = strings.ToLower(st.Code().String())
	}
	return "error: " + msg, ClassError
}

func moduleOff(module string, off []string) bool {
	if module == "" {
		return false
	}
	for _, m := range off {
		if m == module {
			return true
		}
	}
	return false
}

// checkBinary reads the plugin binary and compares its sha256 with the configured one.
func checkBinary(name, path string, want []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("plugins: plugin %q: binary %s: %w", name, path, err)
	}
	defer f.Close()
	hash := sha256.New()
	if _, err := io.Copy(hash, f); err != nil {
		return fmt.Errorf("plugins: plugin %q: reading %s: %w", name, path, err)
	}
	if got := hash.Sum(nil); string(got) != string(want) {
		return fmt.Errorf("plugins: plugin %q: sha256 mismatch for %s: the config says %s, the binary is %s; "+
			"if the binary was rebuilt on purpose, put its checksum (sha256sum %s) in the plugin entry's sha256",
			name, path, hex.EncodeToString(want), hex.EncodeToString(got), path)
	}
	return nil
}

// absPath makes a plugin path absolute, so that a bare name is never looked up in $PATH.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// listEntries are the values of a list field of an answer: its strings and numbers (an array's
// elements, or the one value).
func listEntries(v *ctxjson.Value) []string {
	switch v.Kind() {
	case ctxjson.KindString, ctxjson.KindNumber:
		return []string{v.Text()}
	case ctxjson.KindArray:
		var out []string
		for _, e := range v.Elems() {
			if k := e.Kind(); k == ctxjson.KindString || k == ctxjson.KindNumber {
				out = append(out, e.Text())
			}
		}
		return out
	}
	return nil
}
