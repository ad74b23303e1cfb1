package plugins

import (
	"context"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hclogAdapter lets go-plugin (which wants an hclog.Logger) write to the host's slog logger. The
// plugin's own stderr lines arrive here too. go-plugin is chatty at debug and trace; both go to
// slog's debug level.
type hclogAdapter struct {
	log  *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLog(l *slog.Logger) *hclogAdapter { return &hclogAdapter{log: l} }

func (a *hclogAdapter) level(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace, hclog.Debug, hclog.NoLevel, hclog.DefaultLevel:
		return slog.LevelDebug
	case hclog.Info:
		return slog.LevelInfo
	case hclog.Warn:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func (a *hclogAdapter) Log(l hclog.Level, msg string, args ...any) {
	lv := a.level(l)
	if !a.log.Enabled(context.Background(), lv) {
		return
	}
	all := make([]any, 0, len(a.args)+len(args)+2)
	if a.name != "" {
		all = append(all, "component", a.name)
	}
	all = append(all, a.args...)
	all = append(all, args...)
	a.log.Log(context.Background(), lv, msg, all...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) enabled(l slog.Level) bool { return a.log.Enabled(context.Background(), l) }
func (a *hclogAdapter) IsTrace() bool             { return a.enabled(slog.LevelDebug) }
func (a *hclogAdapter) IsDebug() bool             { return a.enabled(slog.LevelDebug) }
func (a *hclogAdapter) IsInfo() bool              { return a.enabled(slog.LevelInfo) }
func (a *hclogAdapter) IsWarn() bool              { return a.enabled(slog.LevelWarn) }
func (a *hclogAdapter) IsError() bool             { return a.enabled(slog.LevelError) }

func (a *hclogAdapter) ImpliedArgs() []any { return a.args }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.args = append(append([]any(nil), a.args...), args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

// SetLevel is ignored: the slog handler decides.
func (a *hclogAdapter) SetLevel(hclog.Level) {}

func (a *hclogAdapter) GetLevel() hclog.Level {
	switch {
	case a.IsDebug():
		return hclog.Debug
	case a.IsInfo():
		return hclog.Info
	case a.IsWarn():
		return hclog.Warn
	}
	return hclog.Error
}

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return slog.NewLogLogger(a.log.Handler(), slog.LevelDebug).Writer()
}
