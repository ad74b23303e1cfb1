package surface

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/promptgate/promptgate/policy/vet"
	"github.com/promptgate/promptgate/proxy/relay"
)

// Response headers of promptgate that surfaces set.
const (
	HeaderProtocol = "X-Promptgate-Protocol"
	// HeaderBlocked counts the model's calls that the client did not get: blocked or held (each
	// with its notice) and, in onViolation "continue", refused calls promptgate answered itself, in
	// every round.
	HeaderBlocked = "X-Promptgate-Blocked"
	// HeaderContinued counts the rounds an answer was continued (onViolation "continue"), when any.
	HeaderContinued = "X-Promptgate-Continued"
)

var (
	// ErrUpstreamTimeout: the upstream sent no response headers, or a streamed body went silent,
	// for longer than limits.upstreamTimeout.
	ErrUpstreamTimeout = errors.New("upstream timeout")
	// ErrUpstreamMalformed: the upstream answered with something that is not the API's shape.
	ErrUpstreamMalformed = errors.New("upstream answered a malformed response")
)

// MaxBody caps an upstream answer that is read whole to be vetted or edited.
const MaxBody = 64 << 20

// maxPresize bounds the buffer ReadBody sets aside for an answer's announced length before it
// arrives.
const maxPresize = 1 << 20

// ReadBody reads a whole upstream answer, at most MaxBody bytes, and closes it.
func ReadBody(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	// Room for the announced length, within a bound (the upstream is not trusted to announce what
	// it sends), and the bytes.MinRead that ReadFrom wants free, so that a typical answer lands in
	// one allocation.
	size := bytes.MinRead
	if n := resp.ContentLength; n > 0 && n <= maxPresize {
		size = int(n) + bytes.MinRead
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	_, err := buf.ReadFrom(io.LimitReader(resp.Body, MaxBody+1))
	body := buf.Bytes()
	if err != nil {
		if errors.Is(err, ErrUpstreamTimeout) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: reading body: %v", ErrUpstreamMalformed, err)
	}
	if len(body) > MaxBody {
		return nil, fmt.Errorf("%w: body larger than %d bytes", ErrUpstreamMalformed, MaxBody)
	}
	return body, nil
}

// PlainBody refuses a success answer in a content coding: the transport asks for none (so that an
// answer read to be vetted costs what the upstream sent), so any coding (gzip, br, deflate, zstd,
// "gzip, br" ...) was not asked for, and its bytes cannot be vetted — the client would decode them
// into something the relay never read.
func PlainBody(resp *http.Response) error {
	for _, v := range resp.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				resp.Body.Close()
				return fmt.Errorf("%w: a body in content coding %q, which was not asked for", ErrUpstreamMalformed, v)
			}
		}
	}
	resp.Header.Del("Content-Encoding")
	return nil
}

// PassedJSON reads a passed-through success answer that a surface edits (see Passthrough): ok is
// false for an answer whose status is not 200, passed as it is; an answer in a content coding, or
// whose body is not valid JSON, fails with ErrUpstreamMalformed (what names it in the error).
func PassedJSON(resp *http.Response, what string) (body []byte, ok bool, err error) {
	if resp.StatusCode != http.StatusOK {
		return nil, false, nil
	}
	if err := PlainBody(resp); err != nil {
		return nil, false, err
	}
	if body, err = ReadBody(resp); err != nil {
		return nil, false, err
	}
	if !gjson.ValidBytes(body) {
		return nil, false, fmt.Errorf("%w: %s is not valid JSON", ErrUpstreamMalformed, what)
	}
	return body, true, nil
}

// SetBody replaces a response's body (and status) with b; a changed status makes it JSON.
func SetBody(resp *http.Response, status int, b []byte) {
	if status != resp.StatusCode {
		resp.StatusCode, resp.Status = status, fmt.Sprintf("%d %s", status, http.StatusText(status))
		resp.Header.Set("Content-Type", "application/json")
	}
	resp.Header.Del("Content-Encoding")
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
}

// StreamBody makes body, a vetted stream of unknown length, the response's body.
func StreamBody(resp *http.Response, body io.ReadCloser) {
	resp.Body = body
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
}

// ErrorJSON is the OpenAI error body {"error":{"message","type","param":null,"code"}}.
func ErrorJSON(message, typ, code string) []byte {
	b := []byte(`{"error":{"message":"","type":"","param":null,"code":""}}`)
	b, _ = sjson.SetBytes(b, "error.message", message)
	b, _ = sjson.SetBytes(b, "error.type", typ)
	b, _ = sjson.SetBytes(b, "error.code", code)
	return b
}

// ErrorParamJSON is ErrorJSON with the request field the error is about in param.
func ErrorParamJSON(message, typ, param, code string) []byte {
	b := ErrorJSON(message, typ, code)
	b, _ = sjson.SetBytes(b, "error.param", param)
	return b
}

// ClipID is an id as an error message shows it: at most 128 bytes.
func ClipID(id string) string {
	if len(id) > 128 {
		return id[:128] + "…"
	}
	return id
}

// CodeListingNotAllowed refuses a listing of stored objects while the upstream key is shared
// (Stored).
const CodeListingNotAllowed = "listing_not_allowed"

// NoListingMessage is the message of the refusal of a listing of what (e.g. "responses").
func NoListingMessage(what string) string {
	return "listing stored " + what + " is not served: promptgate sends one upstream key for every client, so the upstream would list every client's; retrieve each by the id its create answered"
}

// BlockedErrorJSON is the OpenAI error body for a call blocked in error mode.
func BlockedErrorJSON(d vet.Decision) []byte {
	return ErrorJSON(vet.Notice(d), "permission_error", relay.CodeToolCallBlocked)
}

// CheckErrorBody passes an upstream error with a JSON body on; any other error body is malformed.
func CheckErrorBody(resp *http.Response, ct string) error {
	body, err := ReadBody(resp)
	if err != nil {
		return err
	}
	if !gjson.ValidBytes(body) {
		return fmt.Errorf("%w: status %d with a non-JSON body (%s)", ErrUpstreamMalformed, resp.StatusCode, ct)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	return nil
}

// LoosePaths are the readings of a request's path that servers and the proxies in front of them are
// known to make, each resolved to a clean path: as sent, and percent-decoded once, twice and three
// times; each with ";params" kept, cut per segment, or cut from the first ";" on, and with
// backslashes read as slashes; dot segments and repeated slashes resolved, blanks and control
// characters at the end dropped; letter case kept. A check of what a path names must hold for every
// one of them.
func LoosePaths(r *http.Request) []string {
	var out []string
	add := func(p string) {
		p = path.Clean("/" + strings.TrimRightFunc(p, func(c rune) bool { return c <= ' ' || c == 0x7f }))
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	p := r.URL.EscapedPath()
	for range 4 {
		add(p)
		add(strings.ReplaceAll(p, `\`, "/"))
		if j := strings.IndexByte(p, ';'); j >= 0 {
			add(p[:j])
			segs := strings.Split(p, "/")
			for k, s := range segs {
				segs[k], _, _ = strings.Cut(s, ";")
			}
			add(strings.Join(segs, "/"))
		}
		d, err := url.PathUnescape(p)
		if err != nil || d == p {
			break
		}
		p = d
	}
	return out
}

// LoosePath is a request's path as a loose upstream router might read it: percent escapes decoded
// (%2F and double escapes too), ";params" cut off, dot segments and repeated or trailing slashes
// resolved, blanks and control characters at the end dropped; letter case is kept.
func LoosePath(r *http.Request) string {
	p := r.URL.EscapedPath()
	for range 3 {
		d, err := url.PathUnescape(p)
		if err != nil || d == p {
			break
		}
		p = d
	}
	if i := strings.IndexByte(p, ';'); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRightFunc(p, func(c rune) bool { return c <= ' ' || c == 0x7f })
	return path.Clean("/" + p)
}
