// Package etcdstore is the fleet backend of store.Store: every promptgate instance of a fleet
// points at one etcd key prefix and serves the same active definitions.
//
// It mirrors the bbolt backend (store.Bolt) exactly: immutable versions counted from 1 per name,
// one active pointer per name, the activation history that Rollback walks, rollouts applied and
// reverted atomically whatever their size, tool enablement overrides, the Validate hook, and
// seeding an empty prefix from the definitions built into the binary. Every change is one etcd
// transaction guarded by compare-and-swap on the keys it read, retried when another writer got
// there first: the version counter for a new version; the one key holding every active pointer and
// history (the active set) for an activation, a rollback, a rollout or a revert, so that watchers
// see each of them whole. A rollout writes its new versions first (inactive), then moves every
// pointer in that one transaction.
//
// Open refuses a prefix nested in another fleet's or holding another's (checkNesting), migrates a
// prefix of the older layout 1 (migrate), and refuses one that `store copy` is writing (Import).
//
// Watchers are called after local changes (before the changing method returns) and after remote
// ones (an etcd watch on the prefix). A prober tracks whether etcd answers; while it does not, the
// store says so (Connected, Options.OnState) and Snapshot fails, so callers keep their last
// snapshot; when etcd answers again the store re-reads the snapshot and calls the watchers
// (resync). Every successful Snapshot is written to Options.SnapshotFile, which Open uses when etcd
// is unreachable at start.
//
// It does not own what a definition means (that is the Validate hook) nor the readiness endpoint.
package etcdstore

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/builtin"
)

// etcd layout 2 under the prefix P (which ends in "/"). Version and sequence numbers in keys are
// 20-digit zero-padded decimals, so that etcd's byte order is numeric order; values that are
// numbers are decimal.
//
//	P schema                          "2"
//	P createdAt                       RFC 3339 time the prefix was initialised
//	P seq/KIND/NAME                   last version number of NAME (the version counter)
//	P versions/KIND/NAME/VERSION      body, byte for byte as given (never rewritten)
//	P info/KIND/NAME/VERSION          JSON {"version","createdAt","author","note"}
//	P activeset                       JSON {"KIND":{"NAME":{"active":N,"history":[...],"shadow":M}}}: every
//	                                  active pointer, activation stack (most recent last) and protocol
//	                                  version in shadow, in one key
//	P rolloutseq                      last rollout sequence number
//	P rollouts/SEQ                    JSON AppliedRollout, in the order applied
//	P rolloutids/ID                   SEQ
//	P tools/TOOL                      JSON ToolOverride
//	P copying                         present only while `store copy` writes the prefix (no schema yet)
//
// Layout 1 (schema "1") kept each name's pointer in P active/KIND/NAME and its stack in P
// history/KIND/NAME, so a rollout of N names needed 5N operations in one transaction, over etcd's
// --max-txn-ops (128) past 25 names. Open migrates a layout-1 prefix (see migrate); Export reads
// both.
const (
	keySchema     = "schema"
	keyCreatedAt  = "createdAt"
	dirSeq        = "seq/"
	dirVersions   = "versions/"
	dirInfo       = "info/"
	keyActiveSet  = "activeset"
	keyRolloutSeq = "rolloutseq"
	dirRollouts   = "rollouts/"
	dirRolloutIDs = "rolloutids/"
	dirTools      = "tools/"
	keyCopying    = "copying"
	// Layout 1 only.
	dirActive  = "active/"
	dirHistory = "history/"
)

// Layout versions (the value of P schema).
const (
	schemaVersion = 2
	legacySchema  = 1
)

// maxTxnOps is etcd's default --max-txn-ops: no transaction of this package holds more operations
// (or comparisons) than this.
const maxTxnOps = 128

// Defaults of Options.
const (
	DefaultDialTimeout   = 5 * time.Second
	DefaultProbeInterval = time.Second
	seedNote             = "seeded from the binary"
)

// Options configure Open.
type Options struct {
	// Endpoints are etcd client URLs ("http://127.0.0.1:2379"; "https://..." with TLS). Required.
	Endpoints []string
	// Prefix is the key prefix of this fleet, e.g. "/promptgate/prod/". A missing trailing "/" is
	// added. Prefixes of two fleets must not nest: Open refuses a prefix inside another fleet's, or
	// holding keys that are not promptgate's (see checkNesting).
	Prefix string
	// TLS, when not nil, is used to talk to etcd (CA, client certificate).
	TLS *tls.Config
	// Username and Password authenticate to etcd when Username is not empty.
	Username, Password string
	// DialTimeout bounds the first contact and every probe; zero means DefaultDialTimeout.
	DialTimeout time.Duration
	// ProbeInterval is how often the connection is checked; zero means DefaultProbeInterval.
	ProbeInterval time.Duration
	// Logger receives one line per change and per connection state change. Nil discards.
	Logger *slog.Logger
	// Validate is the hook of store.Options.Validate: called for every body before it is stored.
	Validate func(kind store.Kind, name string, body []byte) error
	// Links is the hook of store.Options.Links: run against the active set that a change
	// compare-and-swaps (for AddVersion, the one it reads first), before anything of the change is
	// written.
	Links store.LinksFunc
	// SnapshotFile, when not empty, receives every successful Snapshot (written atomically); Open
	// serves it when etcd is unreachable at start.
	SnapshotFile string
	// OnState, when not nil, is called on every change of the connection state (not concurrently
	// with itself); reason is empty when connected.
	OnState func(connected bool, reason string)
	// NoSeed leaves an empty prefix empty (for `store copy`) and skips the schema check.
	NoSeed bool
}

// Etcd is the Store backed by an etcd key prefix. Create it with Open.
type Etcd struct {
	cliMu     sync.Mutex
	cli       *clientv3.Client // replaced once by probeLoop after a delayed login (login)
	closed    bool
	login     *clientv3.Config // credentials etcd has not accepted yet (down at Open); only probeLoop uses it
	eps       []string
	tls       *tls.Config
	p         string
	endpoints string
	log       *slog.Logger
	validate  func(store.Kind, string, []byte) error
	links     store.LinksFunc
	snapFile  string
	probe     time.Duration
	timeout   time.Duration
	onState   func(bool, string)

	watchers store.Watchers

	notified atomic.Int64 // highest revision the watchers were called for

	stateMu   sync.Mutex
	connected bool
	reason    string

	fileMu   sync.Mutex
	fileLast []byte
	fallback *store.Snapshot // from SnapshotFile, served until the first snapshot read from etcd
	synced   atomic.Bool

	stop func()
	wg   sync.WaitGroup
}

var _ store.Store = (*Etcd)(nil)

// Open connects to etcd. An uninitialised prefix is seeded (in one transaction) with every built-in
// template and protocol as version 1, each activated, unless Options.NoSeed. When etcd does not
// answer within DialTimeout, Open loads Options.SnapshotFile if it exists and starts disconnected
// (serving it and reconnecting in the background); otherwise it fails with an error naming the
// endpoints.
func Open(ctx context.Context, opts Options) (*Etcd, error) {
	if len(opts.Endpoints) == 0 {
		return nil, errors.New("store: etcd: no endpoints")
	}
	prefix := opts.Prefix
	if prefix == "" || prefix == "/" {
		return nil, errors.New("store: etcd: give a key prefix such as /promptgate/ (the root of the keyspace is refused)")
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	s := &Etcd{
		p:         prefix,
		endpoints: strings.Join(opts.Endpoints, ","),
		eps:       opts.Endpoints,
		tls:       opts.TLS,
		log:       opts.Logger,
		validate:  opts.Validate,
		links:     opts.Links,
		snapFile:  opts.SnapshotFile,
		probe:     opts.ProbeInterval,
		timeout:   opts.DialTimeout,
		onState:   opts.OnState,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.probe <= 0 {
		s.probe = DefaultProbeInterval
	}
	if s.timeout <= 0 {
		s.timeout = DefaultDialTimeout
	}
	cfg := clientv3.Config{
		Endpoints:   opts.Endpoints,
		DialTimeout: s.timeout,
		TLS:         opts.TLS,
		Username:    opts.Username,
		Password:    opts.Password,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: s.timeout,
		})},
	}
	// With credentials, clientv3.New logs in, so it fails when etcd does not answer. Then connect
	// without them for now (serving the snapshot file) and let probeLoop log in once etcd answers.
	cli, err := clientv3.New(cfg)
	if err != nil && opts.Username != "" && !refused(err) {
		anon := cfg
		anon.Username, anon.Password = "", ""
		if c, aerr := clientv3.New(anon); aerr == nil {
			cli, s.login = c, &cfg
		}
	}
	if s.login == nil && err != nil {
		if refused(err) {
			return nil, fmt.Errorf("store: etcd %s refused the login of user %q: %w", s.endpoints, opts.Username, err)
		}
		return nil, fmt.Errorf("store: etcd %s: %w", s.endpoints, err)
	}
	s.cli = cli
	if s.login == nil {
		tctx, cancel := context.WithTimeout(ctx, s.timeout)
		_, err = cli.Get(tctx, s.p+keySchema)
		cancel()
	}
	if err != nil && refused(err) {
		// etcd answered, and said no: a snapshot file would hide a misconfiguration, so fail.
		_ = cli.Close()
		return nil, fmt.Errorf("store: etcd %s refused to read prefix %s: %w; check the etcd user and password, and that the user's role grants readwrite on the prefix", s.endpoints, s.p, err)
	}
	if err != nil {
		if terr := tlsProblem(ctx, opts.Endpoints, opts.TLS, s.timeout); terr != nil {
			err = fmt.Errorf("%w (%w)", err, terr)
		}
		reason := fmt.Sprintf("etcd %s unreachable: %v", s.endpoints, err)
		if s.snapFile == "" || opts.NoSeed {
			_ = cli.Close()
			return nil, fmt.Errorf("store: etcd %s (prefix %s) is unreachable: %w; start etcd or fix --store (no snapshot file to fall back on)", s.endpoints, s.p, err)
		}
		snap, ferr := ReadSnapshotFile(s.snapFile, s.p, s.check)
		if ferr != nil {
			_ = cli.Close()
			return nil, fmt.Errorf("store: etcd %s (prefix %s) is unreachable (%v), and the snapshot file cannot be used: %w", s.endpoints, s.p, err, ferr)
		}
		s.fallback = &snap
		s.reason = reason
		s.log.Warn("store: etcd unreachable at start; serving the snapshot file until it answers", "endpoints", s.endpoints, "snapshot", s.snapFile, "err", err)
	} else {
		if err := s.checkNesting(ctx); err != nil {
			_ = cli.Close()
			return nil, fmt.Errorf("store: etcd %s: %w", s.endpoints, err)
		}
		if !opts.NoSeed {
			if err := s.init(ctx); err != nil {
				_ = cli.Close()
				return nil, fmt.Errorf("store: etcd %s (prefix %s): %w", s.endpoints, s.p, err)
			}
		}
		s.connected = true
		s.synced.Store(true)
	}
	bg, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.wg.Add(2)
	go s.watchLoop(bg)
	go s.probeLoop(bg)
	return s, nil
}

// Prefix returns the key prefix, ending in "/".
func (s *Etcd) Prefix() string { return s.p }

// Endpoints returns the endpoints, comma-separated.
func (s *Etcd) Endpoints() string { return s.endpoints }

// Connected reports whether etcd answered the last probe, and why not.
func (s *Etcd) Connected() (bool, string) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	return s.connected, s.reason
}

func (s *Etcd) setState(connected bool, reason string) {
	s.stateMu.Lock()
	defer s.stateMu.Unlock()
	if s.connected == connected && (connected || s.reason == reason) {
		return
	}
	changed := s.connected != connected
	s.connected, s.reason = connected, reason
	if changed {
		if connected {
			s.log.Info("store: etcd connected again; definitions resynced", "endpoints", s.endpoints)
		} else {
			s.log.Warn("store: etcd unreachable; serving the last snapshot", "endpoints", s.endpoints, "reason", reason)
		}
	}
	if s.onState != nil {
		s.onState(connected, reason)
	}
}

// init checks the schema, migrates a layout-1 prefix, and seeds an uninitialised one.
func (s *Etcd) init(ctx context.Context) error {
	for {
		tr, err := s.client().Txn(ctx).Then(
			clientv3.OpGet(s.p+keySchema),
			clientv3.OpGet(s.p+keyCopying, clientv3.WithCountOnly()),
		).Commit()
		if err != nil {
			return err
		}
		if kvs := tr.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			v, err := strconv.Atoi(string(kvs[0].Value))
			if err != nil || v < 1 {
				return fmt.Errorf("schema version %q is not valid; is this prefix promptgate's?", kvs[0].Value)
			}
			if v > schemaVersion {
				return fmt.Errorf("schema version %d is newer than this binary supports (%d); upgrade promptgate", v, schemaVersion)
			}
			if v == legacySchema {
				if err := s.migrate(ctx, kvs[0].ModRevision); err != nil {
					return err
				}
				continue
			}
			return nil
		}
		if tr.Responses[1].GetResponseRange().Count > 0 {
			return errCopying(s.p)
		}
		if seeded, err := s.seed(ctx); err != nil || seeded {
			return err
		}
	}
}

// errCopying is the error of a prefix that a `store copy` is writing (or left unfinished).
func errCopying(prefix string) error {
	return fmt.Errorf("a `promptgate store copy` into prefix %s is running or was interrupted (key %s%s, no schema yet): wait for it to print its summary, or run it again", prefix, prefix, keyCopying)
}

// seed writes every built-in definition as version 1, active, and the schema, in one transaction
// guarded by the schema key's absence; false when another instance initialised the prefix first
// (init reads again).
func (s *Etcd) seed(ctx context.Context) (bool, error) {
	type seed struct {
		kind store.Kind
		def  builtin.Definition
	}
	var seeds []seed
	for _, d := range builtin.Templates() {
		seeds = append(seeds, seed{store.KindTemplate, d})
	}
	for _, d := range builtin.Protocols() {
		seeds = append(seeds, seed{store.KindProtocol, d})
	}
	for _, sd := range seeds {
		name, err := s.check(sd.kind, sd.def.Body)
		if err != nil {
			return false, fmt.Errorf("seed built-in %s: %w", sd.def.File, err)
		}
		if name != sd.def.Name {
			return false, fmt.Errorf("built-in %s: %w: carries name %q, want %q", sd.def.File, store.ErrInvalid, name, sd.def.Name)
		}
	}
	now := time.Now().UTC()
	// Names that already have versions (data without a schema key) are kept, as bbolt does.
	head, err := s.client().Txn(ctx).Then(clientv3.OpGet(s.p + keyActiveSet)).Commit()
	if err != nil {
		return false, err
	}
	set, setRev, err := decodeSet(head.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return false, err
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.p+keySchema), "=", 0), s.setGuard(setRev)}
	var ops []clientv3.Op
	for _, sd := range seeds {
		k := s.kSeq(sd.kind, sd.def.Name)
		r, err := s.client().Get(ctx, k, clientv3.WithCountOnly())
		if err != nil {
			return false, err
		}
		if r.Count > 0 {
			continue
		}
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
		info, err := json.Marshal(store.VersionInfo{Version: 1, CreatedAt: now, Author: store.BuiltinAuthor, Note: seedNote})
		if err != nil {
			return false, err
		}
		ops = append(ops,
			clientv3.OpPut(k, "1"),
			clientv3.OpPut(s.kBody(sd.kind, sd.def.Name, 1), string(sd.def.Body)),
			clientv3.OpPut(s.kInfo(sd.kind, sd.def.Name, 1), string(info)))
		set.move(sd.kind, sd.def.Name, 1)
	}
	put, err := s.setOp(set)
	if err != nil {
		return false, err
	}
	ops = append(ops, put,
		clientv3.OpPut(s.p+keyCreatedAt, now.Format(time.RFC3339Nano)),
		clientv3.OpPut(s.p+keySchema, strconv.Itoa(schemaVersion)))
	tr, err := s.client().Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, fmt.Errorf("initialise: %w", err)
	}
	if tr.Succeeded {
		s.log.Info("store: new etcd prefix seeded with the built-in definitions", "prefix", s.p, "definitions", len(seeds))
	}
	return tr.Succeeded, nil
}

// check runs the structural checks and the Validate hook; errors wrap store.ErrInvalid.
func (s *Etcd) check(kind store.Kind, body []byte) (string, error) {
	name, err := store.CheckStructure(kind, body)
	if err != nil {
		return name, err
	}
	if s.validate != nil {
		if err := s.validate(kind, name, body); err != nil {
			return name, fmt.Errorf("store: %s: %w: %w", store.Key(kind, name), store.ErrInvalid, err)
		}
	}
	return name, nil
}

// --- keys ---

func num(v uint64) string { return fmt.Sprintf("%020d", v) }

func (s *Etcd) kSeq(k store.Kind, n string) string { return s.p + dirSeq + string(k) + "/" + n }
func (s *Etcd) kBody(k store.Kind, n string, v int) string {
	return s.p + dirVersions + string(k) + "/" + n + "/" + num(uint64(v))
}
func (s *Etcd) kInfo(k store.Kind, n string, v int) string {
	return s.p + dirInfo + string(k) + "/" + n + "/" + num(uint64(v))
}
func (s *Etcd) kRollout(seq uint64) string  { return s.p + dirRollouts + num(seq) }
func (s *Etcd) kRolloutID(id string) string { return s.p + dirRolloutIDs + id }
func (s *Etcd) kTool(name string) string    { return s.p + dirTools + name }

// committed records that the watchers are being called for revision rev (so that the etcd watch
// does not call them a second time for the same change), then calls them.
func (s *Etcd) committed(rev int64) {
	for {
		cur := s.notified.Load()
		if rev <= cur || s.notified.CompareAndSwap(cur, rev) {
			break
		}
	}
	s.notify()
}

func precheck(ctx context.Context, kind store.Kind) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if !kind.Valid() {
		return store.UnknownKind(kind)
	}
	return nil
}

func checkName(kind store.Kind, name string) error {
	if !store.ValidName(name) {
		return fmt.Errorf("%s/%q: invalid name: %w", kind, name, store.ErrNotFound)
	}
	return nil
}

// intOf parses a decimal value; an absent key is 0.
func intOf(kvs []*mvccKV) (int, int64, error) {
	if len(kvs) == 0 {
		return 0, 0, nil
	}
	v, err := strconv.Atoi(string(kvs[0].Value))
	if err != nil || v < 0 {
		return 0, 0, fmt.Errorf("key %s holds %q, not a number", kvs[0].Key, kvs[0].Value)
	}
	return v, kvs[0].ModRevision, nil
}

func historyOf(kvs []*mvccKV) ([]int, int64, error) {
	if len(kvs) == 0 {
		return nil, 0, nil
	}
	var h []int
	if err := json.Unmarshal(kvs[0].Value, &h); err != nil {
		return nil, 0, fmt.Errorf("key %s: decode history: %w", kvs[0].Key, err)
	}
	return h, kvs[0].ModRevision, nil
}

func decodeInfo(raw []byte, v int) (store.VersionInfo, error) {
	var info store.VersionInfo
	if err := json.Unmarshal(raw, &info); err != nil {
		return info, fmt.Errorf("version %d: decode info: %w", v, err)
	}
	info.Version = v
	return info, nil
}

// versionOfKey reads the trailing 20-digit version of a versions/ or info/ key.
func versionOfKey(key []byte) (int, error) {
	i := strings.LastIndexByte(string(key), '/')
	v, err := strconv.ParseUint(string(key[i+1:]), 10, 63)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("key %s: bad version", key)
	}
	return int(v), nil
}

// Watch implements store.Store. fn is called after a local change, on the goroutine that made it
// and before the changing method returns, and after a remote change or a resync, on the store's
// goroutine.
func (s *Etcd) Watch(fn func()) (cancel func()) { return s.watchers.Add(fn) }

func (s *Etcd) notify() { s.watchers.Notify() }

// watchLoop calls the watchers for every remote change under the prefix.
func (s *Etcd) watchLoop(ctx context.Context) {
	defer s.wg.Done()
	for ctx.Err() == nil {
		wch := s.client().Watch(clientv3.WithRequireLeader(ctx), s.p, clientv3.WithPrefix())
		for wr := range wch {
			if err := wr.Err(); err != nil {
				s.log.Warn("store: etcd watch interrupted; restarting it", "err", err)
				break
			}
			if len(wr.Events) == 0 {
				continue
			}
			rev := wr.Events[len(wr.Events)-1].Kv.ModRevision
			if rev <= s.notified.Load() {
				continue // our own change: the watchers were called already
			}
			s.committed(rev)
		}
		// Wait until etcd answers again (the prober resyncs then), and watch anew; changes may have
		// been missed between the two watches, so resync here too.
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(s.probe):
			}
			if ok, _ := s.Connected(); ok {
				break
			}
		}
		s.notify()
	}
}

// probeLoop checks every ProbeInterval that etcd answers a linearizable read; on the first answer
// after a failure it re-reads the snapshot, calls the watchers, and only then reports connected.
func (s *Etcd) probeLoop(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.probe)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.login != nil {
			if err := s.logIn(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				s.setState(false, fmt.Sprintf("etcd %s unreachable: log in: %v", s.endpoints, err))
				continue
			}
		}
		pctx, cancel := context.WithTimeout(ctx, max(s.probe, time.Second))
		_, err := s.client().Get(pctx, s.p+keySchema)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			reason := fmt.Sprintf("etcd %s unreachable: %v", s.endpoints, err)
			if terr := tlsProblem(ctx, s.eps, s.tls, max(s.probe, time.Second)); terr != nil {
				reason = fmt.Sprintf("%s (%v)", reason, terr)
			}
			s.setState(false, reason)
			continue
		}
		if ok, _ := s.Connected(); ok {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, s.timeout)
		_, err = s.Snapshot(sctx)
		cancel()
		if err != nil {
			s.setState(false, fmt.Sprintf("etcd %s: resync failed: %v", s.endpoints, err))
			continue
		}
		s.notify()
		s.setState(true, "")
	}
}

// client is the etcd client in use.
func (s *Etcd) client() *clientv3.Client {
	s.cliMu.Lock()
	defer s.cliMu.Unlock()
	return s.cli
}

// logIn makes the client with the credentials of s.login, which etcd did not answer at Open, and
// puts it in place of the client without them.
func (s *Etcd) logIn(ctx context.Context) error {
	cfg := *s.login
	cfg.Context = ctx
	cli, err := clientv3.New(cfg)
	if err != nil {
		return err
	}
	s.cliMu.Lock()
	if s.closed {
		s.cliMu.Unlock()
		return cli.Close()
	}
	old := s.cli
	s.cli = cli
	s.cliMu.Unlock()
	s.login = nil
	_ = old.Close() // ends the watch on it; watchLoop watches anew with the new client
	s.log.Info("store: logged in to etcd", "endpoints", s.endpoints, "user", cfg.Username)
	return nil
}

// Close implements store.Store.
func (s *Etcd) Close() error {
	s.watchers.Clear()
	s.stop()
	s.cliMu.Lock()
	s.closed = true
	cli := s.cli
	s.cliMu.Unlock()
	err := cli.Close()
	s.wg.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("store: close etcd %s: %w", s.endpoints, err)
	}
	return nil
}
