// Package builtin holds the default templates and protocols that ship inside the promptgate binary.
//
// It owns the embedded files only: templates/NAME.txt (the file name without .txt is the template
// name, the content is its text, byte for byte) and protocols/ID.json (a whole protocol definition
// whose "id" equals the file name). They are plain files so that operators can read them.
//
// It does not store, version or validate anything: package store seeds a new database from these
// definitions, and a caller may use Template or Protocol as the fallback when the database lacks a
// name. The returned values are fresh copies on every call; callers may keep them.
package builtin

import (
	"bytes"
	"embed"
	"encoding/json"
	"io/fs"
	"path"
	"sort"
	"strings"
)

//go:embed templates/*.txt protocols/*.json
var files embed.FS

const (
	templateDir = "templates"
	templateExt = ".txt"
	protocolDir = "protocols"
	protocolExt = ".json"
)

// Definition is one built-in definition.
type Definition struct {
	// Name is the template name or the protocol id, taken from the file name.
	Name string
	// Text is the template text; empty for protocols.
	Text string
	// Body is the definition as JSON, the form package store keeps:
	// {"name":"...","text":"..."} for a template, the file content for a protocol.
	Body []byte
	// File is the path of the embedded file, e.g. "templates/base_tool_call_v2.txt".
	File string
}

// Templates returns every built-in template, sorted by name.
func Templates() []Definition { return load(templateDir, templateExt) }

// Protocols returns every built-in protocol, sorted by id.
func Protocols() []Definition { return load(protocolDir, protocolExt) }

// Template returns the built-in template called name, if there is one.
func Template(name string) (Definition, bool) { return one(templateDir, templateExt, name) }

// Protocol returns the built-in protocol with that id, if there is one.
func Protocol(id string) (Definition, bool) { return one(protocolDir, protocolExt, id) }

func load(dir, ext string) []Definition {
	entries, err := fs.ReadDir(files, dir)
	if err != nil {
		// The directories are embedded at build time; a failure here is a broken build.
		panic("builtin: read embedded " + dir + ": " + err.Error())
	}
	out := make([]Definition, 0, len(entries))
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ext)
		if !ok || e.IsDir() {
			continue
		}
		d, ok := one(dir, ext, name)
		if ok {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func one(dir, ext, name string) (Definition, bool) {
	if name == "" || strings.ContainsAny(name, `/\`) {
		return Definition{}, false
	}
	file := path.Join(dir, name+ext)
	data, err := files.ReadFile(file)
	if err != nil {
		return Definition{}, false
	}
	d := Definition{Name: name, File: file}
	if dir == protocolDir {
		d.Body = data // ReadFile returns a fresh copy.
		return d, true
	}
	d.Text = string(data)
	d.Body = templateBody(name, d.Text)
	return d, true
}

// templateBody encodes a template as {"name":...,"text":...} without HTML escaping, so the stored
// JSON stays readable (<, > and & are kept as they are).
func templateBody(name, text string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(struct {
		Name string `json:"name"`
		Text string `json:"text"`
	}{name, text}); err != nil {
		panic("builtin: encode template " + name + ": " + err.Error()) // strings always encode
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
