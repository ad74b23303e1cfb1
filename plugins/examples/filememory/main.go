// Command filememory is a promptgate context source that gives the model each user's long-term
// memory: the JSON object in <dir>/<user>.json.
//
// Plugin entry:
//
//	plugins:
//	  - {name: memory, path: ./bin/filememory, sha256: "...", module: memory, minMode: standard,
//	     config: {dir: /var/lib/promptgate/memory}}
//
// The runtime context then holds "memory": {...that object...}. A user without a file, or a
// request without a user, gets {}. The user name (promptgate.user or X-Promptgate-User) is
// untrusted: it is encoded into a file name that cannot leave dir (letters, digits, "-", "_",
// "@" and non-leading "." are kept, every other byte becomes %XX, so "../x" reads
// "%2E.%2Fx.json" inside dir), and the file is opened through os.Root, which refuses symlinks
// that lead out of dir. Config keys: dir (required), maxBytes (the largest file read, default
// 262144; larger files are an error).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/promptgate/promptgate/plugins/sdk"
)

func main() { sdk.Serve(&source{}) }

// defaultMaxBytes is the largest memory file read when the config sets none.
const defaultMaxBytes = 256 << 10

// maxUserBytes bounds the user name; longer names get {}.
const maxUserBytes = 200

type source struct {
	root     *os.Root
	maxBytes int64
}

func (s *source) Describe() sdk.Description {
	return sdk.Description{Name: "filememory", Version: "1.0.0", Module: "memory", Fields: []string{"<the user's memory object>"}}
}

func (s *source) Configure(cfg map[string]any) error {
	var c struct {
		Dir      string `json:"dir"`
		MaxBytes int64  `json:"maxBytes"`
	}
	if err := sdk.DecodeConfig(cfg, &c); err != nil {
		return err
	}
	if c.Dir == "" {
		return errors.New("config: dir is required: the folder that holds <user>.json files")
	}
	if c.MaxBytes < 0 {
		return errors.New("config: maxBytes must be positive")
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = defaultMaxBytes
	}
	root, err := os.OpenRoot(c.Dir)
	if err != nil {
		return fmt.Errorf("config: dir: %w", err)
	}
	s.root, s.maxBytes = root, c.MaxBytes
	return nil
}

func (s *source) Gather(_ context.Context, req sdk.Request) (sdk.Response, error) {
	if s.root == nil {
		return sdk.Response{}, errors.New("not configured")
	}
	if req.User == "" || len(req.User) > maxUserBytes {
		return sdk.Response{}, nil
	}
	name := fileName(req.User)
	f, err := s.root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return sdk.Response{Notes: []string{"no memory file for this user"}}, nil
	}
	if err != nil {
		return sdk.Response{}, errors.New("memory file cannot be opened")
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, s.maxBytes+1))
	if err != nil {
		return sdk.Response{}, errors.New("memory file cannot be read")
	}
	if int64(len(b)) > s.maxBytes {
		return sdk.Response{}, fmt.Errorf("memory file is over %d bytes", s.maxBytes)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' || !json.Valid(b) {
		return sdk.Response{}, errors.New("memory file is not a JSON object")
	}
	return sdk.Response{
		Fields: json.RawMessage(b),
		Notes:  []string{fmt.Sprintf("read %s (%d bytes)", name, len(b))},
	}, nil
}

// fileName encodes a non-empty user name into the name of its file inside dir: the result never
// holds a path separator, never starts with ".", and distinct users get distinct names.
func fileName(user string) string {
	var b strings.Builder
	for i := 0; i < len(user); i++ {
		c := user[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '_', c == '@', c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	b.WriteString(".json")
	return b.String()
}
