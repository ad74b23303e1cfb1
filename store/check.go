package store

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Top-level keys the store reads from a definition body.
const (
	templateNameKey = "name"
	templateTextKey = "text"
	protocolIDKey   = "id"
	pinServerKey    = "server"
)

// namePattern is what a template name or protocol id must match.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ValidName reports whether s is a valid template name, protocol id or MCP server label: 1 to 64
// characters of letters, digits, '_', '.' and '-'.
func ValidName(s string) bool { return namePattern.MatchString(s) }

// NameKey returns the top-level key that carries the name of a definition of kind k: "name"
// (templates), "id" (protocols) or "server" (MCP pin sets).
func NameKey(k Kind) string {
	switch k {
	case KindProtocol:
		return protocolIDKey
	case KindMCPPins:
		return pinServerKey
	}
	return templateNameKey
}

// CheckStructure runs the structural checks every stored body passes, and returns the name the body
// carries: the body is one valid UTF-8 JSON object without duplicate top-level keys, with a string
// "name" (templates), "id" (protocols) or "server" (MCP pin sets) matching ValidName, and, for
// templates, a string "text".
// It does not run Options.Validate. Errors wrap ErrInvalid.
func CheckStructure(kind Kind, body []byte) (string, error) {
	if !kind.Valid() {
		return "", UnknownKind(kind)
	}
	name, err := checkBody(kind, body)
	if err != nil {
		return "", fmt.Errorf("store: %s: %w", label(kind, name), err)
	}
	return name, nil
}

// label is "KIND/NAME", or "KIND" while the name is not known.
func label(kind Kind, name string) string {
	if name == "" {
		return string(kind)
	}
	return Key(kind, name)
}

// checkBody returns the name (when it could be read) and an unprefixed error wrapping ErrInvalid.
func checkBody(kind Kind, body []byte) (string, error) {
	if !utf8.Valid(body) {
		return "", fmt.Errorf("%w: body is not valid UTF-8", ErrInvalid)
	}
	if !gjson.ValidBytes(body) {
		return "", fmt.Errorf("%w: body is not valid JSON", ErrInvalid)
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return "", fmt.Errorf("%w: body must be a JSON object, got %s", ErrInvalid, jsonType(root))
	}
	seen := make(map[string]bool)
	var dup string
	root.ForEach(func(k, _ gjson.Result) bool {
		if seen[k.String()] {
			dup = k.String()
			return false
		}
		seen[k.String()] = true
		return true
	})
	if dup != "" {
		return "", fmt.Errorf("%w: duplicate key %q", ErrInvalid, dup)
	}
	key := NameKey(kind)
	n := root.Get(key) // the keys hold no gjson path syntax
	switch {
	case !n.Exists():
		return "", fmt.Errorf("%w: missing %q", ErrInvalid, key)
	case n.Type != gjson.String:
		return "", fmt.Errorf("%w: %q must be a string, got %s", ErrInvalid, key, jsonType(n))
	case !ValidName(n.Str):
		return "", fmt.Errorf("%w: %q is %q; want 1 to 64 characters of A-Z a-z 0-9 _ . -", ErrInvalid, key, n.Str)
	}
	if kind == KindTemplate {
		t := root.Get(templateTextKey)
		if t.Type != gjson.String {
			return n.Str, fmt.Errorf("%w: %q must be a string, got %s", ErrInvalid, templateTextKey, jsonType(t))
		}
	}
	return n.Str, nil
}

func jsonType(r gjson.Result) string {
	switch {
	case !r.Exists():
		return "nothing"
	case r.IsObject():
		return "an object"
	case r.IsArray():
		return "an array"
	}
	switch r.Type {
	case gjson.String:
		return "a string"
	case gjson.Number:
		return "a number"
	case gjson.True, gjson.False:
		return "a boolean"
	case gjson.Null:
		return "null"
	}
	return "an unknown value"
}

// LinksFunc checks how active definitions refer to each other (a workflow protocol and its base,
// say). active holds every record a change leaves active (for AddVersion: with the new body as if
// it were active, version 0) and changed the keys ("KIND/NAME") of the definitions the change
// touches, sorted. Its error refuses the change; the store wraps it in ErrInvalid. It should report
// only problems that involve a changed definition, so that an older inconsistency does not block
// every change.
type LinksFunc func(active Snapshot, changed []string) error

// Check calls f, when it is not nil, on snap (which it changes) with the bodies of proposed
// ("KIND/NAME" → body) taking the place of the active ones, the keys of proposed counting as
// changed; an error wraps ErrInvalid. Backends call it with what a change would leave active.
func (f LinksFunc) Check(snap Snapshot, proposed map[string][]byte, changed []string) error {
	if f == nil {
		return nil
	}
	for key, body := range proposed {
		kind, name, _ := strings.Cut(key, "/")
		m := snap.Of(Kind(kind))
		if m == nil {
			continue
		}
		m[name] = Record{Kind: Kind(kind), Name: name, Body: body}
		changed = append(changed, key)
	}
	slices.Sort(changed)
	if err := f(snap, slices.Compact(changed)); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// CheckShadow says why version of kind/name cannot be put in shadow (version 0: taken out of it),
// given the version in shadow now (prev), the active one and whether version exists; nil when it
// can. Every backend applies it inside the transaction that moves the pointer.
func CheckShadow(kind Kind, name string, version, prev, active int, exists bool) error {
	switch {
	case kind != KindProtocol:
		return fmt.Errorf("%s/%s: only protocols have shadow versions: %w", kind, name, ErrInvalid)
	case version < 0:
		return fmt.Errorf("%s/%s@%d: %w", kind, name, version, ErrNotFound)
	case version == 0 && prev == 0:
		return fmt.Errorf("%s/%s: no version is in shadow: %w", kind, name, ErrNotFound)
	case version == 0:
		return nil
	case !exists:
		return fmt.Errorf("%s/%s@%d: %w", kind, name, version, ErrNotFound)
	case version == active:
		return fmt.Errorf("%s/%s@%d is the active version: %w: put another version in shadow, or activate a version to replace this one", kind, name, version, ErrInvalid)
	}
	return nil
}
