// Command profilegraph is a promptgate context source that turns a user metadata file into the
// compact "familiarity graph" of the seed: the user's top interests, projects, goals, tools and
// boundaries, each clamped, plus their relationship flags.
//
// Plugin entry:
//
//	plugins:
//	  - {name: profile, path: ./bin/profilegraph, sha256: "...", module: familiarity_graph,
//	     minMode: standard, config: {file: /etc/promptgate/users.json, limit: 5}}
//
// The file is one JSON object keyed by user id:
//
//	{"u-1": {"interests": ["jazz", {"name": "distributed systems", "weight": 9}],
//	         "projects": [...], "goals": [...], "tools": [...], "boundaries": ["no medical advice"],
//	         "relationship": {"trusted": true, "mentor": false, "stage": "colleague"}}}
//
// An item is a string or an object with "name" (or "label", "title") and an optional "weight"
// (or "score", "count"; default 1). Interests, projects, goals and tools are ranked by weight
// (ties keep the file's order), boundaries keep the file's order; duplicates (ignoring case) are
// dropped, each name is cut to maxChars characters and each list to limit items.
//
// By module mode: minimal → {} (nothing); standard → the lists and "relationship", the names of
// the flags that are true; full → the same plus "relationshipFlags", the whole relationship
// object. An unknown user gets {}. The file is read again when its size or modification time
// changes. Config keys: file (required), limit (default 5, at most 50), maxChars (default 80).
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/promptgate/promptgate/plugins/sdk"
)

func main() { sdk.Serve(&source{}) }

const (
	defaultLimit    = 5
	maxLimit        = 50
	defaultMaxChars = 80
	maxFileBytes    = 64 << 20
)

type source struct {
	file     string
	limit    int
	maxChars int

	mu    sync.Mutex
	mtime time.Time
	size  int64
	users map[string]userMeta
}

// userMeta is one user's entry in the file.
type userMeta struct {
	Interests    []json.RawMessage `json:"interests"`
	Projects     []json.RawMessage `json:"projects"`
	Goals        []json.RawMessage `json:"goals"`
	Tools        []json.RawMessage `json:"tools"`
	Boundaries   []json.RawMessage `json:"boundaries"`
	Relationship json.RawMessage   `json:"relationship"`
}

// graph is the answer; the field order is the order in the runtime context.
type graph struct {
	Interests         []string        `json:"interests,omitempty"`
	Projects          []string        `json:"projects,omitempty"`
	Goals             []string        `json:"goals,omitempty"`
	Tools             []string        `json:"tools,omitempty"`
	Boundaries        []string        `json:"boundaries,omitempty"`
	Relationship      []string        `json:"relationship,omitempty"`
	RelationshipFlags json.RawMessage `json:"relationshipFlags,omitempty"`
}

func (s *source) Describe() sdk.Description {
	return sdk.Description{
		Name: "profilegraph", Version: "1.0.0", Module: "familiarity_graph",
		Fields: []string{"interests", "projects", "goals", "tools", "boundaries", "relationship", "relationshipFlags"},
	}
}

func (s *source) Configure(cfg map[string]any) error {
	var c struct {
		File     string `json:"file"`
		Limit    int    `json:"limit"`
		MaxChars int    `json:"maxChars"`
	}
	if err := sdk.DecodeConfig(cfg, &c); err != nil {
		return err
	}
	if c.File == "" {
		return errors.New("config: file is required: the user metadata JSON")
	}
	if c.Limit < 0 || c.Limit > maxLimit {
		return fmt.Errorf("config: limit must be between 1 and %d", maxLimit)
	}
	if c.MaxChars < 0 {
		return errors.New("config: maxChars must be positive")
	}
	s.file, s.limit, s.maxChars = c.File, cmp.Or(c.Limit, defaultLimit), cmp.Or(c.MaxChars, defaultMaxChars)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reload()
}

// reload reads the file when it changed since the last read. s.mu is held.
func (s *source) reload() error {
	fi, err := os.Stat(s.file)
	if err != nil {
		return fmt.Errorf("profile file: %w", err)
	}
	if s.users != nil && fi.ModTime().Equal(s.mtime) && fi.Size() == s.size {
		return nil
	}
	if fi.Size() > maxFileBytes {
		return fmt.Errorf("profile file is over %d bytes", maxFileBytes)
	}
	b, err := os.ReadFile(s.file)
	if err != nil {
		return fmt.Errorf("profile file: %w", err)
	}
	var users map[string]userMeta
	if err := json.Unmarshal(b, &users); err != nil {
		return fmt.Errorf("profile file is not an object of users: %w", err)
	}
	s.users, s.mtime, s.size = users, fi.ModTime(), fi.Size()
	return nil
}

func (s *source) Gather(_ context.Context, req sdk.Request) (sdk.Response, error) {
	if !req.Mode.AtLeast(sdk.ModeStandard) || req.User == "" {
		return sdk.Response{}, nil
	}
	s.mu.Lock()
	err := s.reload()
	u, ok := s.users[req.User]
	s.mu.Unlock()
	if err != nil {
		return sdk.Response{}, errors.New("profile file cannot be read")
	}
	if !ok {
		return sdk.Response{Notes: []string{"no profile for this user"}}, nil
	}
	g := graph{
		Interests:  s.top(u.Interests, true),
		Projects:   s.top(u.Projects, true),
		Goals:      s.top(u.Goals, true),
		Tools:      s.top(u.Tools, true),
		Boundaries: s.top(u.Boundaries, false),
	}
	flags := relationship(u.Relationship)
	for _, f := range flags {
		if f.set && len(g.Relationship) < s.limit {
			g.Relationship = append(g.Relationship, s.clamp(f.name))
		}
	}
	if req.Mode.AtLeast(sdk.ModeFull) && flags != nil {
		g.RelationshipFlags = u.Relationship
	}
	return sdk.Response{Fields: g}, nil
}

// item is one entry of a list.
type item struct {
	name   string
	weight float64
}

// top ranks (when ranked) and clamps one list.
func (s *source) top(raw []json.RawMessage, ranked bool) []string {
	items := make([]item, 0, len(raw))
	seen := map[string]bool{}
	for _, r := range raw {
		it, ok := parseItem(r)
		if !ok {
			continue
		}
		k := strings.ToLower(it.name)
		if seen[k] {
			continue
		}
		seen[k] = true
		items = append(items, it)
	}
	if ranked {
		slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(b.weight, a.weight) })
	}
	var out []string
	for _, it := range items[:min(len(items), s.limit)] {
		out = append(out, s.clamp(it.name))
	}
	return out
}

func parseItem(r json.RawMessage) (item, bool) {
	var name string
	if json.Unmarshal(r, &name) == nil {
		name = strings.TrimSpace(name)
		return item{name: name, weight: 1}, name != ""
	}
	var o struct {
		Name, Label, Title   string
		Weight, Score, Count *float64
	}
	if json.Unmarshal(r, &o) != nil {
		return item{}, false
	}
	it := item{name: strings.TrimSpace(cmp.Or(o.Name, o.Label, o.Title)), weight: 1}
	for _, w := range []*float64{o.Weight, o.Score, o.Count} {
		if w != nil {
			it.weight = *w
			break
		}
	}
	return it, it.name != ""
}

// clamp cuts a name to maxChars characters, ending a cut one with "…".
func (s *source) clamp(name string) string {
	if utf8.RuneCountInString(name) <= s.maxChars {
		return name
	}
	return string([]rune(name)[:s.maxChars-1]) + "…"
}

type flag struct {
	name string
	set  bool
}

// relationship lists the flags of the relationship object in the file's order; a flag is set when
// its value is true. nil when there is no object.
func relationship(raw json.RawMessage) []flag {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return nil
	}
	flags := []flag{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil
		}
		name, _ := t.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		flags = append(flags, flag{name: name, set: v == true})
	}
	return flags
}
