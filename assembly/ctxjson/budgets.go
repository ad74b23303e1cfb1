package ctxjson

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Budgets maps dotted paths into the context object to the most characters the encoding of the
// value at that path may take. The first segment names a source ("memory"), each further one a
// key of an object or an index of an array ("request.attachments.0"). Keys holding a dot cannot
// be addressed. A budget of 0 drops the value. Paths that do not resolve are ignored; "meta" is
// not budgeted.
type Budgets map[string]int

// ParseBudgets parses PROMPT_RUNTIME_CONTEXT_BUDGETS_JSON: a JSON object of path → number. A number
// in (0, 1] is a share of max (0.5 → max/2, rounded down), a whole number > 1 a count of
// characters, and 0 drops the field. An empty or all-whitespace raw means no budgets. Every
// problem is reported, each naming its key.
func ParseBudgets(raw string, max int) (Budgets, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	if max <= 0 {
		return nil, fmt.Errorf("ctxjson: budgets: max characters must be positive, got %d", max)
	}
	v, err := Parse([]byte(raw))
	if err != nil {
		var pe *parseError
		if errors.As(err, &pe) {
			if key := keyBefore(raw, pe.Offset); key != "" {
				return nil, fmt.Errorf("ctxjson: budgets: key %q: want a JSON number (NaN, Infinity and quotes are not allowed): %w", key, err)
			}
		}
		return nil, fmt.Errorf("ctxjson: budgets: not valid JSON: %w", err)
	}
	if v.Kind() != KindObject {
		return nil, fmt.Errorf("ctxjson: budgets: want a JSON object of path to number, got %s", v.Kind())
	}
	b := make(Budgets, v.Len())
	var errs []error
	for path, val := range v.Fields() {
		n, err := budget(path, val, max)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b[path] = n
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return b, nil
}

func budget(path string, val *Value, max int) (int, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("ctxjson: budgets: key %q: %s", path, fmt.Sprintf(format, args...))
	}
	if path == "" || strings.HasPrefix(path, ".") || strings.HasSuffix(path, ".") || strings.Contains(path, "..") {
		return 0, bad("want a dotted path of non-empty keys like \"request.attachments\"")
	}
	if path == "meta" || strings.HasPrefix(path, "meta.") {
		return 0, bad("meta cannot be budgeted; budget the sources instead")
	}
	if val.Kind() != KindNumber {
		return 0, bad("want a number (a share <= 1 or a count of characters > 1), got %s", val.Kind())
	}
	f, err := strconv.ParseFloat(val.Text(), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, bad("number %s is out of range", val.Text())
	}
	switch {
	case f < 0:
		return 0, bad("negative budget %s; use 0 to drop the field", val.Text())
	case f <= 1:
		return int(math.Floor(f * float64(max))), nil
	case f != math.Trunc(f):
		return 0, bad("%s characters is not a whole number", val.Text())
	case f >= float64(max):
		return max, nil
	default:
		return int(f), nil
	}
}

// keyBefore returns the raw text of the object key whose value starts at byte offset off of
// raw, as far as a simple look back can tell, or "".
func keyBefore(raw string, off int) string {
	off = min(max(off, 0), len(raw))
	colon := strings.LastIndexByte(raw[:off], ':')
	if colon < 0 || strings.TrimSpace(raw[colon+1:off]) != "" {
		return ""
	}
	k := strings.TrimRight(raw[:colon], " \t\r\n")
	if !strings.HasSuffix(k, `"`) {
		return ""
	}
	k = k[:len(k)-1]
	return k[strings.LastIndexByte(k, '"')+1:]
}
