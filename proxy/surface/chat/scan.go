package chat

import "bytes"

// indexQuoted is bytes.Index(data, sep) for a sep of two bytes or more that starts with '"'. JSON
// has a quote every few bytes, so bytes.Index, which looks for sep's first byte first, soon gives
// up on it for a byte-by-byte search; this looks for the rest of sep and checks the quote before
// it.
func indexQuoted(data, sep []byte) int {
	for from := 1; from < len(data); {
		i := bytes.Index(data[from:], sep[1:])
		if i < 0 {
			return -1
		}
		if at := from + i - 1; data[at] == sep[0] {
			return at
		}
		from += i + 1
	}
	return -1
}
