// Package redact turns URLs, and errors that quote them, into what a log line or an error message
// may show: no user info (user:password@) and no query string, either of which may carry a key. It
// owns only that rendering; refusing such URLs where they are configured is the caller's job.
package redact

import (
	"errors"
	"net/url"
	"strings"
)

// URL returns s with its user info replaced by "***" and its query and fragment dropped. Text that
// does not parse as a URL is cut the same way by hand: everything of its authority up to the last
// '@' is replaced, and everything from the first '?' or '#' is dropped.
func URL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return Parsed(u)
	}
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + 3
	}
	end := len(s)
	if i := strings.IndexByte(s[start:], '/'); i >= 0 {
		end = start + i
	}
	if at := strings.LastIndexByte(s[start:end], '@'); at >= 0 {
		s = s[:start] + "***" + s[start+at:]
	}
	return s
}

// Parsed is URL for a parsed URL; u is not changed.
func Parsed(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = nil, "", false, "", ""
	if u.User != nil {
		return strings.Replace(c.String(), "//", "//***@", 1)
	}
	return c.String()
}

// Error returns err with the URL of every *url.Error in its chain (net/http's `Post "URL": ...`)
// redacted; an error without one is returned as it is.
func Error(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) || ue.URL == "" {
		return err
	}
	return &redacted{err: err, old: ue.URL, new: URL(ue.URL)}
}

// redacted is an error whose message has one URL replaced; it unwraps to the original.
type redacted struct {
	err      error
	old, new string
}

func (r *redacted) Error() string { return strings.ReplaceAll(r.err.Error(), r.old, r.new) }

func (r *redacted) Unwrap() error { return r.err }
