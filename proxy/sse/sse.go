// Package sse reads and writes Server-Sent Events (text/event-stream) for byte relays.
//
// Reader splits a byte stream into events as each one completes and hands out, next to the parsed
// fields, the event's raw bytes exactly as received, so that a relay can forward an event it does
// not change byte-for-byte. It has no line-length limit of its own (NewReaderMax sets a cap on one
// event), accepts CR, LF and CRLF line ends (also a CRLF split across two reads), and never holds
// more than the event being read plus whatever bytes the last read returned beyond it.
//
// The package owns the wire format only. It does not know what the data of an event means (the
// proxy's surface packages, such as proxy/surface/chat, do), and it does not flush or buffer
// output.
package sse

import (
	"bytes"
	"errors"
	"io"
	"strconv"
)

// Event is one event block of a stream: every line up to and including the blank line that ends it.
type Event struct {
	// Raw is the event exactly as received, line ends and comments included; forwarding Raw of
	// every event, in order, reproduces the input (less a byte-order mark at its start, which the
	// SSE specification drops, as browsers and the WHATWG parsers do). It aliases the Reader's
	// buffer and is valid only until the next call to Next: copy it to keep it.
	Raw []byte
	// Data is the value of the event's data lines joined with "\n"; nil when it has none.
	// Like Raw, it may alias the Reader's buffer.
	Data []byte
	// HasData is true when the event has at least one data line (Data may still be empty).
	HasData bool
	// Event is the value of the last event line ("" when none).
	Event string
	// ID is the value of the last id line; HasID tells an empty id from none. An id holding a
	// NUL byte is ignored, as the SSE specification says.
	ID    string
	HasID bool
	// Retry is the value of the last valid retry line (ASCII digits only), in milliseconds;
	// HasRetry is false when there is none.
	Retry    int64
	HasRetry bool
	// Truncated is true for a last event that the input ended inside: it was not closed by a blank
	// line. Its fields hold what its lines say, its last line even if that has no line end. A
	// browser would drop such an event; a relay decides for itself.
	Truncated bool
	// Plain is true for an event in the form every SSE client splits and reads alike, as far as
	// the Reader knows it: not truncated, no CR byte in Raw (each line ends in LF alone), and each
	// line blank, a comment, or a data, event, id or retry field with its colon. False says
	// nothing: the Reader leaves the question to its caller once the stream has shown a CR.
	Plain bool
}

// minRead is the smallest free space handed to the underlying reader.
const minRead = 4096

// firstBuf is the size of a Reader's first buffer: the 32 KB an io.Copy (and a bare
// httputil.ReverseProxy) reads with, so that an upstream that is ahead of the relay gives it a
// whole burst of events per read, not 4 KB of it, and a relay writes to its client no more often
// than a bare proxy does.
const firstBuf = 32 << 10

// Reader reads events from an io.Reader. It is not safe for concurrent use.
type Reader struct {
	r   io.Reader
	buf []byte // buf[start:] holds the bytes not yet returned as events
	// lent is the buffer given to Lend, kept for Release (buf moves off it when an event outgrows
	// it).
	lent []byte
	// start is where the current event begins in buf.
	start int
	// scan is how far buf has been scanned for the end of the current event.
	scan int
	// lineStart is where the line being scanned begins.
	lineStart int
	// afterCR is true when the byte before buf[scan] was a CR that ended a line: an LF right
	// after it belongs to that line end.
	afterCR bool
	err     error
	// names are the event names seen so far (up to maxNames), so that a stream that repeats a few
	// names does not allocate one string per event.
	names []string
	// max caps the bytes of one event (0: no cap).
	max int
	// bomDone is set once the start of the stream has been checked for a byte-order mark.
	bomDone bool
	// cr is set once a CR byte has been read from the stream: until then every line ends in LF
	// alone, and a line's end is found with one search, not two.
	cr bool
}

// bom is the UTF-8 byte-order mark that the SSE specification drops at the start of a stream.
var bom = []byte("\ufeff")

// ErrEventTooLarge is returned by Next when one event grows past the Reader's cap (NewReaderMax).
// The bytes read of that event are dropped, not returned.
var ErrEventTooLarge = errors.New("sse: event too large")

// maxNames bounds the event names a Reader remembers.
const maxNames = 32

// NewReader returns a Reader that reads from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: r}
}

// NewReaderMax returns a Reader that reads from r and gives up with ErrEventTooLarge on an event of
// more than max bytes, so that an upstream line without an end cannot make it buffer without bound.
// Its buffer never grows past max plus one read.
func NewReaderMax(r io.Reader, max int) *Reader {
	return &Reader{r: r, max: max}
}

// Names gives the Reader the event names its stream is expected to use, before the first Next: an
// event: line of one of them is given these very strings, without an allocation. names is not
// changed (names met later are kept apart, as far as the Reader remembers names).
func (r *Reader) Names(names []string) {
	if r.names == nil {
		r.names = names[:len(names):len(names)]
	}
}

// Lend makes buf (its capacity; its contents do not matter) the Reader's first buffer, before the
// first Next: a buffer pool's instead of one allocated per stream. Release gives it back.
func (r *Reader) Lend(buf []byte) {
	if r.buf == nil && r.lent == nil {
		r.buf, r.lent = buf[:0], buf[:0]
	}
}

// Release ends the Reader's use of the buffer given to Lend and returns it (nil when none was
// lent): every event it returned is invalid from then on, and Next reports ErrReleased.
func (r *Reader) Release() []byte {
	lent := r.lent
	r.lent, r.buf, r.start, r.scan, r.lineStart, r.afterCR = nil, nil, 0, 0, 0, false
	r.err = ErrReleased
	return lent
}

// ErrReleased is returned by Next after Release.
var ErrReleased = errors.New("sse: reader released")

// Next returns the next event. At the end of the input it returns an event with Truncated set if
// the input ended inside one, and io.EOF on the call after that (at once if nothing was left).
// An error from the underlying reader is returned the same way: first the unfinished event, then
// the error. Next reads from the underlying reader only while no whole event is buffered. (One
// exception keeps events independent of how the input was split into reads: an event whose
// closing blank line ends with a CR that is the last byte read so far waits for the next byte,
// which may be the LF of a CRLF. Streams with LF or CRLF line ends never wait.)
func (r *Reader) Next() (Event, error) {
	for {
		if !r.bomDone {
			if len(r.buf) < len(bom) && r.err == nil && bytes.HasPrefix(bom, r.buf) {
				r.fill() // the start may still turn out to be a byte-order mark
				continue
			}
			r.bomDone = true
			if bytes.HasPrefix(r.buf, bom) {
				r.start, r.scan, r.lineStart = len(bom), len(bom), len(bom)
			}
		}
		if end, ok := r.findEnd(r.err != nil); ok {
			raw := r.buf[r.start:end]
			r.start, r.scan, r.lineStart = end, end, end
			return r.parse(raw, false), nil
		}
		if r.err != nil {
			if r.start < len(r.buf) {
				raw := r.buf[r.start:]
				r.start, r.scan, r.lineStart = len(r.buf), len(r.buf), len(r.buf)
				return r.parse(raw, true), nil
			}
			return Event{}, r.err
		}
		r.fill()
	}
}

// Buffered reports whether Next would return without reading from the underlying reader: a whole
// event is buffered, or the input has ended (or failed) already.
func (r *Reader) Buffered() bool {
	if r.err != nil {
		return true
	}
	if !r.bomDone {
		return false
	}
	// findEnd moves the scan state on as it goes; leave it where Next expects it.
	scan, lineStart, afterCR := r.scan, r.lineStart, r.afterCR
	_, ok := r.findEnd(false)
	if ok {
		r.scan, r.lineStart, r.afterCR = scan, lineStart, afterCR
	}
	return ok
}

// findEnd scans forward for the blank line that ends the current event and returns the offset
// just past it. A blank line ended by a CR that is the last byte read so far is not taken as the
// end until the next byte (or the end of input, atEOF) shows whether an LF belongs to it: so the
// events do not depend on how the input was split into reads.
func (r *Reader) findEnd(atEOF bool) (int, bool) {
	b := r.buf
	i := r.scan
	for i < len(b) {
		// Skip quickly over the body of a line.
		if i > r.lineStart {
			j := r.lineEnd(b[i:])
			if j < 0 {
				i = len(b)
				break
			}
			i += j
		}
		c := b[i]
		switch {
		case c == '\n' && r.afterCR:
			// Second half of a CRLF: the line already ended at the CR.
			r.afterCR = false
			i++
			r.lineStart = i
		case c == '\n' || c == '\r':
			if i == r.lineStart { // a blank line: the event ends
				end := i + 1
				if c == '\r' {
					if end == len(b) && !atEOF {
						r.scan = i // look at this CR again once more bytes are in
						return 0, false
					}
					if end < len(b) && b[end] == '\n' {
						end++
					}
				}
				r.afterCR = false
				return end, true
			}
			r.afterCR = c == '\r'
			i++
			r.lineStart = i
		default:
			r.afterCR = false
			i++
		}
	}
	r.scan = i
	return 0, false
}

// lineEnd is lineEnd(b) for b read from the Reader's stream: the first LF while the stream has
// shown no CR.
func (r *Reader) lineEnd(b []byte) int {
	if !r.cr {
		return bytes.IndexByte(b, '\n')
	}
	return lineEnd(b)
}

// lineEnd is the offset of the first CR or LF in b, or -1. Both searches are IndexByte's
// (vectorised; IndexAny of a two-byte set tests byte by byte), the CR one only over the line the LF
// ends.
func lineEnd(b []byte) int {
	j := bytes.IndexByte(b, '\n')
	if j < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if k := bytes.IndexByte(b[:j], '\r'); k >= 0 {
		return k
	}
	return j
}

// fill reads more input, first moving the current event to the front of the buffer.
func (r *Reader) fill() {
	if r.start > 0 {
		n := copy(r.buf, r.buf[r.start:])
		r.scan -= r.start
		r.lineStart -= r.start
		r.start = 0
		r.buf = r.buf[:n]
	}
	// Everything buffered now belongs to the one unfinished event.
	if r.max > 0 && len(r.buf) > r.max {
		r.err = ErrEventTooLarge
		r.buf, r.start, r.scan, r.lineStart, r.afterCR = nil, 0, 0, 0, false
		return
	}
	if cap(r.buf)-len(r.buf) < minRead {
		size := 2*cap(r.buf) + minRead
		if cap(r.buf) == 0 {
			size = firstBuf
		}
		if r.max > 0 {
			size = min(size, r.max+1+minRead)
		}
		nb := make([]byte, len(r.buf), size)
		copy(nb, r.buf)
		r.buf = nb
	}
	// Retry a few times on (0, nil), as bufio does, then report io.ErrNoProgress.
	for range 100 {
		n, err := r.r.Read(r.buf[len(r.buf):cap(r.buf)])
		if n < 0 || n > cap(r.buf)-len(r.buf) {
			r.err = errors.New("sse: reader returned an invalid count")
			return
		}
		if !r.cr && bytes.IndexByte(r.buf[len(r.buf):len(r.buf)+n], '\r') >= 0 {
			r.cr = true
		}
		r.buf = r.buf[:len(r.buf)+n]
		if err != nil {
			r.err = err
			return
		}
		if n > 0 {
			return
		}
	}
	r.err = io.ErrNoProgress
}

// parse reads the fields of one event block. truncated means the block was not ended by a blank
// line, so its last line may lack a line end.
func (r *Reader) parse(raw []byte, truncated bool) Event {
	ev := Event{Raw: raw, Truncated: truncated}
	// Plain as far as the lines read so far show: no CR in the stream, so every line of a whole
	// event ends in LF alone.
	plain := !r.cr && !truncated
	dataLines := 0
	var joined []byte // used once there is more than one data line
	for i := 0; i < len(raw); {
		// One line: raw[i:j], its end at j (CR, LF or CRLF) or the end of raw.
		j := len(raw)
		if k := r.lineEnd(raw[i:]); k >= 0 {
			j = i + k
		}
		line := raw[i:j]
		if j < len(raw) {
			if raw[j] == '\r' && j+1 < len(raw) && raw[j+1] == '\n' {
				j++
			}
			j++
		}
		i = j
		if len(line) == 0 || line[0] == ':' {
			continue // blank line, lone LF of a split CRLF, or comment
		}
		name, value := line, []byte(nil)
		if k := bytes.IndexByte(line, ':'); k >= 0 {
			name, value = line[:k], line[k+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		} else {
			plain = false // a field without its colon: not every client reads it as a field
		}
		switch string(name) {
		case "data":
			ev.HasData = true
			dataLines++
			switch dataLines {
			case 1:
				ev.Data = value
			case 2:
				joined = make([]byte, 0, len(ev.Data)+1+len(value))
				joined = append(joined, ev.Data...)
				fallthrough
			default:
				joined = append(joined, '\n')
				joined = append(joined, value...)
				ev.Data = joined
			}
		case "event":
			ev.Event = r.name(value)
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID, ev.HasID = string(value), true
			}
		case "retry":
			if n, ok := parseRetry(value); ok {
				ev.Retry, ev.HasRetry = n, true
			}
		default:
			plain = false
		}
	}
	ev.Plain = plain
	if ev.HasData && ev.Data == nil {
		ev.Data = []byte{}
	}
	return ev
}

// name returns v as a string, the same string for the same bytes as far as it remembers.
func (r *Reader) name(v []byte) string {
	for _, n := range r.names {
		if n == string(v) {
			return n
		}
	}
	n := string(v)
	if len(r.names) < maxNames {
		r.names = append(r.names, n)
	}
	return n
}

// parseRetry accepts ASCII digits only, as the SSE specification says.
func parseRetry(v []byte) (int64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// AppendData appends to dst one event that carries data, as `data: ...` lines ended by a blank
// line; a line break in data (CR, LF or CRLF) starts a new data line, so any data round-trips.
func AppendData(dst, data []byte) []byte {
	for {
		dst = append(dst, "data: "...)
		j := bytes.IndexAny(data, "\r\n")
		if j < 0 {
			dst = append(dst, data...)
			return append(dst, "\n\n"...)
		}
		dst = append(dst, data[:j]...)
		dst = append(dst, '\n')
		if data[j] == '\r' && j+1 < len(data) && data[j+1] == '\n' {
			j++
		}
		data = data[j+1:]
	}
}

// AppendEvent appends to dst one event with an event: line (when name is not empty) and data; see
// AppendData.
func AppendEvent(dst []byte, name string, data []byte) []byte {
	if name != "" {
		dst = append(dst, "event: "...)
		dst = append(dst, name...)
		dst = append(dst, '\n')
	}
	return AppendData(dst, data)
}

// WriteData writes one event that carries data to w; see AppendData.
func WriteData(w io.Writer, data []byte) error {
	_, err := w.Write(AppendData(make([]byte, 0, len(data)+16), data))
	return err
}
