package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/promptgate/promptgate/plugins/sdk"
)

// healthTimeout bounds the health check the supervisor makes after a failed call.
const healthTimeout = 2 * time.Second

// slot is one configured plugin and the process currently serving it.
type slot struct {
	cfg  Spec
	path string // absolute
	sum  []byte // expected sha256
	log  *slog.Logger
	poke chan struct{} // a failed call asks the supervisor to look now

	mu      sync.RWMutex
	client  *plugin.Client // nil while down
	src     *sdk.Client
	upSince time.Time
	down    string // why it is down; "" while up
	// restarts counts the successful starts after the first one.
	restarts int
}

// newSlot checks one plugin entry and its binary, without starting anything.
func newSlot(p Spec, log *slog.Logger) (*slot, error) {
	if p.MinMode == "" {
		p.MinMode = DefaultMinMode
	}
	if !p.MinMode.Valid() {
		return nil, fmt.Errorf("plugins: plugin %q: minMode %q: use minimal, standard or full", p.Name, p.MinMode)
	}
	if p.Name == "" || p.Path == "" {
		return nil, fmt.Errorf("plugins: plugin %q: name and path are required", p.Name)
	}
	want, err := hex.DecodeString(strings.ToLower(strings.TrimSpace(p.SHA256)))
	if err != nil || len(want) != sha256.Size {
		return nil, fmt.Errorf("plugins: plugin %q: sha256 must be 64 hex characters (sha256sum %s)", p.Name, p.Path)
	}
	if p.Timeout <= 0 {
		p.Timeout = DefaultTimeout
	}
	s := &slot{
		cfg: p, path: absPath(p.Path), sum: want,
		log:  log.With("plugin", p.Name),
		poke: make(chan struct{}, 1),
		down: "starting",
	}
	if err := checkBinary(p.Name, s.path, want); err != nil {
		return nil, err
	}
	return s, nil
}

// source returns the plugin's client, or nil while the plugin is down.
func (s *slot) source() *sdk.Client {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.src
}

func (s *slot) downReason() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.down
}

func (s *slot) setDown(why string) {
	s.mu.Lock()
	s.down = why
	s.mu.Unlock()
}

func (s *slot) pokeSupervisor() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// start starts a new plugin process for the slot: checksum, process, handshake (mutual TLS,
// protocol version), Describe, Configure. On success the slot is up.
func (h *Host) start(ctx context.Context, s *slot) error {
	if err := checkBinary(s.cfg.Name, s.path, s.sum); err != nil {
		return err
	}
	cmd := exec.Command(s.path)
	cmd.Env = pluginEnv()
	cl := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake(),
		VersionedPlugins: sdk.PluginSets(&sdk.GRPCPlugin{MaxAnswerBytes: h.opts.MaxAnswerBytes}),
		Cmd:              cmd,
		// go-plugin checks the checksum again right before it runs the file.
		SecureConfig:     &plugin.SecureConfig{Checksum: s.sum, Hash: sha256.New()},
		AutoMTLS:         true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     h.opts.StartTimeout,
		Logger:           newHCLog(s.log),
		// The proxy's environment holds API keys and tokens: a plugin gets only pluginEnv.
		SkipHostEnv: true,
	})
	fail := func(err error) error {
		cl.Kill()
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			return checkBinary(s.cfg.Name, s.path, s.sum) // says which checksums
		}
		return fmt.Errorf("plugins: plugin %q: %w", s.cfg.Name, err)
	}
	rpc, err := cl.Client()
	if err != nil {
		return fail(fmt.Errorf("start %s: %w", s.path, err))
	}
	raw, err := rpc.Dispense(sdk.PluginName)
	if err != nil {
		return fail(fmt.Errorf("dispense: %w", err))
	}
	src, ok := raw.(*sdk.Client)
	if !ok {
		return fail(fmt.Errorf("dispense: unexpected %T", raw))
	}
	sctx, cancel := context.WithTimeout(ctx, h.opts.StartTimeout)
	defer cancel()
	desc, err := src.Describe(sctx)
	if err != nil {
		return fail(fmt.Errorf("describe: %s", statusText(err)))
	}
	if err := src.Configure(sctx, s.cfg.Config); err != nil {
		return fail(fmt.Errorf("configure: %s", statusText(err)))
	}
	if desc.Module != "" && s.cfg.Module != "" && desc.Module != s.cfg.Module {
		s.log.Info("context source describes another module than its entry; the entry's module is used",
			"entry_module", s.cfg.Module, "plugin_module", desc.Module)
	}
	s.mu.Lock()
	s.client, s.src, s.upSince, s.down = cl, src, time.Now(), ""
	s.mu.Unlock()
	s.log.Info("context source started", "program", desc.Name, "version", desc.Version,
		"protocol", cl.NegotiatedVersion())
	return nil
}

// statusText is the message of a gRPC status error, or the error's text.
func statusText(err error) string {
	if st, ok := status.FromError(err); ok {
		return st.Message()
	}
	return err.Error()
}

// supervise restarts the slot's plugin whenever its process is gone, with backoff, until Close.
func (h *Host) supervise(s *slot) {
	tick := time.NewTicker(h.opts.HealthInterval)
	defer tick.Stop()
	backoff := h.opts.RestartBackoff
	for {
		if s.source() != nil {
			select {
			case <-h.life.Done():
				return
			case <-tick.C:
				if !s.exited() {
					continue
				}
			case <-s.poke:
				if s.alive(h.life) {
					continue
				}
			}
			if up := s.markDown(); up >= h.opts.MaxRestartBackoff {
				backoff = h.opts.RestartBackoff // it had been stable: restart quickly
			}
			s.log.Warn("context source process is gone; restarting", "after", backoff)
		}
		wait := time.NewTimer(backoff)
		select {
		case <-h.life.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
		backoff = min(backoff*2, h.opts.MaxRestartBackoff)
		if err := h.start(h.life, s); err != nil {
			if h.life.Err() != nil {
				return
			}
			s.setDown("restart failed: " + err.Error())
			s.log.Error("context source restart failed", "err", err, "next_in", backoff)
			continue
		}
		s.mu.Lock()
		s.restarts++
		s.mu.Unlock()
		s.log.Info("context source restarted")
	}
}

// exited reports whether the plugin process has exited.
func (s *slot) exited() bool {
	s.mu.RLock()
	cl := s.client
	s.mu.RUnlock()
	return cl == nil || cl.Exited()
}

// alive checks the process and its gRPC health service (answered even while a Gather hangs).
func (s *slot) alive(ctx context.Context) bool {
	s.mu.RLock()
	cl := s.client
	s.mu.RUnlock()
	if cl == nil || cl.Exited() {
		return false
	}
	rpc, err := cl.Client()
	if err != nil {
		return false
	}
	gc, ok := rpc.(*plugin.GRPCClient)
	if !ok {
		return rpc.Ping() == nil
	}
	cctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	_, err = grpc_health_v1.NewHealthClient(gc.Conn).Check(cctx, &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName})
	return err == nil || ctx.Err() != nil
}

// markDown takes the slot down and kills what is left of its process. It returns how long the
// process had been up.
func (s *slot) markDown() time.Duration {
	s.mu.Lock()
	cl, up := s.client, time.Since(s.upSince)
	s.client, s.src, s.down = nil, nil, "restarting after the process exited"
	s.mu.Unlock()
	if cl != nil {
		cl.Kill()
	}
	return up
}

// stop ends the plugin process for good (Close).
func (s *slot) stop() {
	s.mu.Lock()
	cl := s.client
	s.client, s.src, s.down = nil, nil, "closed"
	s.mu.Unlock()
	if cl != nil {
		cl.Kill()
		s.log.Info("context source stopped")
	}
}

// pluginEnv is the whole environment of a plugin process: what a program needs to run, nothing
// that could hold a secret. Plugins get their settings through the entry's config: map.
func pluginEnv() []string {
	keep := []string{"PATH", "HOME", "TMPDIR", "TZ", "LANG", "LC_ALL"}
	if runtime.GOOS == "windows" {
		keep = append(keep, "SYSTEMROOT", "TEMP", "TMP")
	}
	var env []string
	for _, k := range keep {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}
