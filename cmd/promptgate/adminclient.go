package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy/telemetry/redact"
	"github.com/promptgate/promptgate/store"
)

// EnvAdminURL names the admin API the CLI uses when --admin is not given and the DB is held by
// serve.
const EnvAdminURL = "PROMPTGATE_ADMIN_URL"

// cliStore is what the definition commands need: the DB file (*store.Bolt) or the admin API of the
// running server (*adminStore) serve it alike.
type cliStore interface {
	Active(ctx context.Context, kind store.Kind, name string) (store.Record, error)
	Get(ctx context.Context, kind store.Kind, name string, version int) (store.Record, error)
	List(ctx context.Context, kind store.Kind) ([]store.Entry, error)
	Entry(ctx context.Context, kind store.Kind, name string) (store.Entry, error)
	AddVersion(ctx context.Context, kind store.Kind, body []byte, author, note string) (int, error)
	Activate(ctx context.Context, kind store.Kind, name string, version int) (int, error)
	Rollback(ctx context.Context, kind store.Kind, name string) (int, int, error)
	SetShadow(ctx context.Context, name string, version int) (int, error)
	ApplyRollout(ctx context.Context, r store.Rollout) error
	RevertLast(ctx context.Context) (store.AppliedRollout, error)
	Rollouts(ctx context.Context) ([]store.AppliedRollout, error)
	Close() error
}

var (
	_ cliStore = (store.Store)(nil)
	_ cliStore = (*adminStore)(nil)
)

// adminStore talks to the admin API of a running `promptgate serve`.
type adminStore struct {
	base   string
	token  string
	client *http.Client
}

func newAdminStore(base, token string) (*adminStore, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Sprintf("--admin %q: give the admin listener's URL, e.g. http://127.0.0.1:8788", redact.URL(base))}
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, usageError{fmt.Sprintf("--admin %q: give the admin listener's URL without user info, query or fragment; the token goes in %s", redact.Parsed(u), EnvAdminToken)}
	}
	return &adminStore{base: strings.TrimRight(base, "/"), token: token, client: &http.Client{Timeout: 30 * time.Second}}, nil
}

// openCLIStore opens the DB file; when `serve` holds it, it goes through the admin API instead:
// --admin, else PROMPTGATE_ADMIN_URL, else http:// + the admin listen address. A DB file that does
// not exist is refused unless --create was given (checkNewDB). The store used is named on stderr.
func openCLIStore(sf *storeFlags, admin string, getenv env, stderr io.Writer) (cliStore, error) {
	token := getenv(EnvAdminToken)
	if admin != "" {
		a, err := newAdminStore(admin, token)
		if err == nil {
			fmt.Fprintf(stderr, "promptgate: using the admin API at %s\n", redact.URL(admin))
		}
		return a, err
	}
	created, err := checkNewDB(sf, getenv)
	if err != nil {
		return nil, err
	}
	st, err := openStoreFlags(context.Background(), sf, false, getenv, nil, "")
	if err == nil {
		sayStore(stderr, sf, created)
		return st, nil
	}
	if !errors.Is(err, store.ErrLocked) {
		return nil, err
	}
	admin = fallbackAdminURL(getenv)
	fmt.Fprintf(stderr, "promptgate: %s is held by a running server; using its admin API at %s\n", sf.db, redact.URL(admin))
	return newAdminStore(admin, token)
}

// call sends one request; a non-2xx answer becomes an error carrying the API's message, mapped to
// the store's sentinel errors where one fits.
func (a *adminStore) call(ctx context.Context, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		switch b := body.(type) {
		case []byte:
			rd = bytes.NewReader(b)
		default:
			j, err := json.Marshal(b)
			if err != nil {
				return err
			}
			rd = bytes.NewReader(j)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Promptgate-Actor", "cli")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("admin API %s: %w", a.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin API %s: %w", a.base, err)
	}
	if resp.StatusCode/100 != 2 {
		msg := gjson.GetBytes(data, "error.message").String()
		if msg == "" {
			msg = strings.TrimSpace(string(data))
		}
		code := gjson.GetBytes(data, "error.code").String()
		var sentinel error
		switch {
		case resp.StatusCode == http.StatusNotFound:
			sentinel = store.ErrNotFound
		case code == "already_applied":
			sentinel = store.ErrAlreadyApplied
		case code == "nothing_to_revert":
			sentinel = store.ErrNothingToRevert
		case code == "no_previous_version":
			sentinel = store.ErrNoPreviousVersion
		case code == "invalid_definition":
			sentinel = store.ErrInvalid
		}
		if sentinel != nil {
			return fmt.Errorf("admin API: %s %s: %w: %s", method, path, sentinel, msg)
		}
		return fmt.Errorf("admin API: %s %s: %d %s: %s", method, path, resp.StatusCode, code, msg)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = data
		return nil
	}
	return json.Unmarshal(data, out)
}

func defsPath(kind store.Kind, name string, rest ...string) string {
	p := "/admin/" + string(kind)
	if name != "" {
		p += "/" + url.PathEscape(name)
	}
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// record decodes a store.Record as the admin API writes it.
func record(data []byte) (store.Record, error) {
	var r struct {
		Kind      store.Kind      `json:"kind"`
		Name      string          `json:"name"`
		Version   int             `json:"version"`
		CreatedAt time.Time       `json:"createdAt"`
		Author    string          `json:"author"`
		Note      string          `json:"note"`
		Body      json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return store.Record{}, fmt.Errorf("admin API: record: %w", err)
	}
	return store.Record{Kind: r.Kind, Name: r.Name, Version: r.Version, CreatedAt: r.CreatedAt, Author: r.Author, Note: r.Note, Body: r.Body}, nil
}

func (a *adminStore) Get(ctx context.Context, kind store.Kind, name string, version int) (store.Record, error) {
	var data []byte
	if err := a.call(ctx, http.MethodGet, defsPath(kind, name, "versions", strconv.Itoa(version)), nil, &data); err != nil {
		return store.Record{}, err
	}
	return record(data)
}

func (a *adminStore) Active(ctx context.Context, kind store.Kind, name string) (store.Record, error) {
	e, err := a.Entry(ctx, kind, name)
	if err != nil {
		return store.Record{}, err
	}
	if e.Active == 0 {
		return store.Record{}, fmt.Errorf("admin API: %s %q has no active version: %w", kind, name, store.ErrNotFound)
	}
	return a.Get(ctx, kind, name, e.Active)
}

func (a *adminStore) List(ctx context.Context, kind store.Kind) ([]store.Entry, error) {
	var data []byte
	if err := a.call(ctx, http.MethodGet, defsPath(kind, ""), nil, &data); err != nil {
		return nil, err
	}
	var list []store.Entry
	raw := gjson.GetBytes(data, string(kind))
	if !raw.IsArray() {
		return nil, fmt.Errorf("admin API: %s list: unexpected answer", kind)
	}
	if err := json.Unmarshal([]byte(raw.Raw), &list); err != nil {
		return nil, fmt.Errorf("admin API: %s list: %w", kind, err)
	}
	return list, nil
}

func (a *adminStore) Entry(ctx context.Context, kind store.Kind, name string) (store.Entry, error) {
	var e store.Entry
	err := a.call(ctx, http.MethodGet, defsPath(kind, name), nil, &e)
	return e, err
}

// AddVersion stores body as a new version through POST /admin/{kind}/{name}/versions; the server
// takes the author from the caller (the CLI says it is the cli).
func (a *adminStore) AddVersion(ctx context.Context, kind store.Kind, body []byte, _ string, note string) (int, error) {
	name, err := store.CheckStructure(kind, body)
	if err != nil {
		return 0, err
	}
	path := defsPath(kind, name, "versions")
	if note != "" {
		path += "?note=" + url.QueryEscape(note)
	}
	var out struct {
		Version int `json:"version"`
	}
	err = a.call(ctx, http.MethodPost, path, body, &out)
	return out.Version, err
}

func (a *adminStore) Activate(ctx context.Context, kind store.Kind, name string, version int) (int, error) {
	var out struct {
		Previous int `json:"previous"`
	}
	err := a.call(ctx, http.MethodPost, defsPath(kind, name, "activate"), map[string]int{"version": version}, &out)
	return out.Previous, err
}

func (a *adminStore) Rollback(ctx context.Context, kind store.Kind, name string) (int, int, error) {
	var out struct {
		Active   int `json:"active"`
		Previous int `json:"previous"`
	}
	err := a.call(ctx, http.MethodPost, defsPath(kind, name, "rollback"), nil, &out)
	return out.Active, out.Previous, err
}

// SetShadow puts a protocol version in shadow (POST .../shadow) or, with version 0, takes it away
// (DELETE).
func (a *adminStore) SetShadow(ctx context.Context, name string, version int) (int, error) {
	var out struct {
		Previous int `json:"previous"`
	}
	if version == 0 {
		err := a.call(ctx, http.MethodDelete, defsPath(store.KindProtocol, name, "shadow"), nil, &out)
		return out.Previous, err
	}
	err := a.call(ctx, http.MethodPost, defsPath(store.KindProtocol, name, "shadow"), map[string]int{"version": version}, &out)
	return out.Previous, err
}

func (a *adminStore) ApplyRollout(ctx context.Context, r store.Rollout) error {
	return a.call(ctx, http.MethodPost, "/admin/rollouts", r, nil)
}

func (a *adminStore) RevertLast(ctx context.Context) (store.AppliedRollout, error) {
	var out store.AppliedRollout
	var data []byte
	if err := a.call(ctx, http.MethodPost, "/admin/rollouts/revert", nil, &data); err != nil {
		return out, err
	}
	// The answer is the reverted rollout, possibly wrapped as {"reverted": {...}}.
	if r := gjson.GetBytes(data, "reverted"); r.IsObject() {
		data = []byte(r.Raw)
	}
	err := json.Unmarshal(data, &out)
	return out, err
}

func (a *adminStore) Rollouts(ctx context.Context) ([]store.AppliedRollout, error) {
	var out struct {
		Applied []store.AppliedRollout `json:"applied"`
	}
	err := a.call(ctx, http.MethodGet, "/admin/rollouts", nil, &out)
	return out.Applied, err
}

// Preview asks the server for a preview report; with cand, as if that stored version were active.
func (a *adminStore) Preview(ctx context.Context, request []byte, headers map[string]string, protocol, path string,
	cand *candidateRef) ([]byte, error) {
	// The request is embedded as the client wrote it, so the server judges its bytes (invalid JSON
	// included).
	h, err := json.Marshal(headers)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"request":`)
	b.Write(bytes.TrimSpace(request))
	b.WriteString(`,"headers":`)
	b.Write(h)
	if protocol != "" {
		p, _ := json.Marshal(protocol)
		b.WriteString(`,"protocol":`)
		b.Write(p)
	}
	if path != "" {
		p, _ := json.Marshal(path)
		b.WriteString(`,"path":`)
		b.Write(p)
	}
	if cand != nil {
		c, _ := json.Marshal(map[string]any{"kind": cand.kind, "name": cand.name, "version": cand.version})
		b.WriteString(`,"candidate":`)
		b.Write(c)
	}
	b.WriteByte('}')
	var out []byte
	err = a.call(ctx, http.MethodPost, "/admin/prompts/preview", b.Bytes(), &out)
	return out, err
}

func (a *adminStore) Close() error { return nil }

// fallbackAdminURL is the admin API of the server that holds the DB: PROMPTGATE_ADMIN_URL, else
// http:// + the admin listen address.
func fallbackAdminURL(getenv env) string {
	if u := getenv(EnvAdminURL); u != "" {
		return u
	}
	return "http://" + orEnv(getenv, EnvAdminListen, DefaultAdminListen)
}
