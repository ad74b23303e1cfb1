package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Top-level keys of a rollout file.
const (
	rolloutIDKey        = "id"
	rolloutTemplatesKey = "templates"
	rolloutProtocolsKey = "protocols"
	// RolloutFileExt is the extension LoadRolloutDir reads.
	RolloutFileExt = ".json"

	maxRolloutIDLen = 200
)

var rolloutIDPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

func checkRolloutID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: missing rollout id", ErrInvalid)
	}
	if len(id) > maxRolloutIDLen || !rolloutIDPattern.MatchString(id) {
		return fmt.Errorf("%w: rollout id %q: want 1 to %d characters of A-Z a-z 0-9 _ . -", ErrInvalid, id, maxRolloutIDLen)
	}
	return nil
}

// LoadRolloutFile reads one rollout file. The file must be one JSON object with the keys "id"
// (required string), "templates" and "protocols" (arrays of definitions, optional) and no other
// key; every definition must pass CheckStructure. Errors name the file and wrap ErrInvalid (or the
// read error).
func LoadRolloutFile(path string) (Rollout, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Rollout{}, fmt.Errorf("store: rollout file %s: %w", path, err)
	}
	r, err := ParseRollout(data)
	if err != nil {
		return Rollout{}, fmt.Errorf("store: rollout file %s: %w", path, err)
	}
	return r, nil
}

// ParseRollout parses and checks the content of a rollout file (see LoadRolloutFile). Its errors
// carry no "store:" prefix and no file name; LoadRolloutFile adds both.
func ParseRollout(data []byte) (Rollout, error) {
	if !utf8.Valid(data) {
		return Rollout{}, fmt.Errorf("%w: not valid UTF-8", ErrInvalid)
	}
	var syntax json.RawMessage
	if err := json.Unmarshal(data, &syntax); err != nil {
		return Rollout{}, fmt.Errorf("%w: %s", ErrInvalid, describeJSONError(data, err))
	}
	root := gjson.ParseBytes(data)
	if !root.IsObject() {
		return Rollout{}, fmt.Errorf("%w: the file must hold one JSON object {\"id\":...,\"templates\":[...],\"protocols\":[...]}, got %s", ErrInvalid, jsonType(root))
	}
	var problem error
	seen := map[string]bool{}
	root.ForEach(func(k, v gjson.Result) bool {
		key := k.String()
		switch {
		case seen[key]:
			problem = fmt.Errorf("%w: duplicate key %q", ErrInvalid, key)
		case key == rolloutIDKey:
			if v.Type != gjson.String {
				problem = fmt.Errorf("%w: %q must be a string, got %s", ErrInvalid, key, jsonType(v))
			}
		case key == rolloutTemplatesKey || key == rolloutProtocolsKey:
			if !v.IsArray() && v.Type != gjson.Null {
				problem = fmt.Errorf("%w: %q must be an array of definitions, got %s", ErrInvalid, key, jsonType(v))
			}
		default:
			problem = fmt.Errorf("%w: unknown key %q (allowed: %q, %q, %q)", ErrInvalid, key, rolloutIDKey, rolloutTemplatesKey, rolloutProtocolsKey)
		}
		seen[key] = true
		return problem == nil
	})
	if problem != nil {
		return Rollout{}, problem
	}
	if !seen[rolloutIDKey] {
		return Rollout{}, fmt.Errorf("%w: missing %q (a unique name for this change, e.g. \"20260224000040-switch-tech-protocol\")", ErrInvalid, rolloutIDKey)
	}
	var r Rollout
	if err := json.Unmarshal(data, &r); err != nil { // shapes were checked above; RawMessage keeps bytes as written
		return Rollout{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := checkRollout(r, checkBody); err != nil {
		return Rollout{}, err
	}
	return r, nil
}

// LoadRolloutDir reads every *.json file of dir (not its sub-folders), sorted by file name, which
// is the order they are applied in. Two files with the same id are an error naming both.
func LoadRolloutDir(dir string) ([]Rollout, error) {
	entries, err := os.ReadDir(dir) // sorted by file name
	if err != nil {
		return nil, fmt.Errorf("store: rollout folder: %w", err)
	}
	out := []Rollout{}
	files := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), RolloutFileExt) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		r, err := LoadRolloutFile(path)
		if err != nil {
			return nil, err
		}
		if first, dup := files[r.ID]; dup {
			return nil, fmt.Errorf("store: rollout file %s: %w: id %q is already used by %s", path, ErrInvalid, r.ID, first)
		}
		files[r.ID] = path
		out = append(out, r)
	}
	return out, nil
}

// Pending returns the rollouts of files whose id is not among applied, in the order of files.
// An applied id that no file has is not an error here.
func Pending(applied []AppliedRollout, files []Rollout) []Rollout {
	done := make(map[string]bool, len(applied))
	for _, a := range applied {
		done[a.ID] = true
	}
	out := []Rollout{}
	for _, r := range files {
		if !done[r.ID] {
			out = append(out, r)
		}
	}
	return out
}

// describeJSONError turns an encoding/json error into "JSON syntax error at line L, column C: ...".
func describeJSONError(data []byte, err error) string {
	var (
		syn *json.SyntaxError
		off int64 = -1
	)
	if errors.As(err, &syn) {
		off = syn.Offset
	}
	if off < 0 {
		return "JSON syntax error: " + strings.TrimPrefix(err.Error(), "json: ")
	}
	line, col := 1, 1
	for i := int64(0); i < off-1 && i < int64(len(data)); i++ { // Offset is just past the bad byte
		if data[i] == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Sprintf("JSON syntax error at line %d, column %d: %s", line, col, strings.TrimPrefix(err.Error(), "json: "))
}
