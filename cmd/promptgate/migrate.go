package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/promptgate/promptgate/store"
	"github.com/tidwall/gjson"
)

// DefaultMigrationsDir is where migrate looks for rollout files.
const DefaultMigrationsDir = "migrations"

// migrate applies (up), reverts (down) or lists (status) rollout files.
func migrate(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env) error {
	if len(args) == 0 {
		return usageError{"migrate: give up, down or status"}
	}
	sub := args[0]
	fs := flag.NewFlagSet("migrate "+sub, flag.ContinueOnError)
	dir := fs.String("dir", DefaultMigrationsDir, "folder of rollout files (*.json), applied in name order")
	admin := fs.String("admin", "", "admin API URL of a running server (token from "+EnvAdminToken+"); used by itself when serve holds the DB")
	sf := addCLIStoreFlags(fs, getenv)
	pos, err := parseFlags(fs, args[1:], stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("migrate %s takes no arguments, got %q", sub, pos)}
	}
	switch sub {
	case "up", "down", "status":
	default:
		return usageError{fmt.Sprintf("migrate: unknown subcommand %q: give up, down or status", sub)}
	}
	st, err := openCLIStore(sf, *admin, getenv, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	switch sub {
	case "up":
		files, err := store.LoadRolloutDir(*dir)
		if err != nil {
			return err
		}
		applied, err := st.Rollouts(ctx)
		if err != nil {
			return err
		}
		pending := store.Pending(applied, files)
		if len(pending) == 0 {
			fmt.Fprintf(stdout, "nothing to apply: %d rollout(s) in %s, all applied\n", len(files), *dir)
			return nil
		}
		for _, r := range pending {
			if err := checkRolloutReferences(ctx, st, r); err != nil {
				return fmt.Errorf("migrate up: %s: %w (rollouts before it stay applied; nothing of this one is stored)", r.ID, err)
			}
			if err := st.ApplyRollout(ctx, r); err != nil {
				return fmt.Errorf("migrate up: %s: %w (rollouts before it stay applied)", r.ID, err)
			}
			fmt.Fprintf(stdout, "applied %s (%d template(s), %d protocol(s))\n", r.ID, len(r.Templates), len(r.Protocols))
		}
		return nil
	case "down":
		r, err := st.RevertLast(ctx)
		if errors.Is(err, store.ErrNothingToRevert) {
			fmt.Fprintln(stdout, "nothing to revert: no rollout is applied")
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "reverted %s\n", r.ID)
		for _, k := range slices.Sorted(maps.Keys(r.Previous)) {
			if v := r.Previous[k]; v == 0 {
				fmt.Fprintf(stdout, "  %s: no active version\n", k)
			} else {
				fmt.Fprintf(stdout, "  %s: version %d active again\n", k, v)
			}
		}
		return nil
	default:
		applied, err := st.Rollouts(ctx)
		if err != nil {
			return err
		}
		files, ferr := store.LoadRolloutDir(*dir)
		for _, a := range applied {
			fmt.Fprintf(stdout, "applied  %s  %s\n", a.ID, a.AppliedAt.Format(time.RFC3339))
		}
		if ferr != nil {
			fmt.Fprintf(stdout, "(rollout files not read: %v)\n", ferr)
			return nil
		}
		for _, r := range store.Pending(applied, files) {
			fmt.Fprintf(stdout, "pending  %s\n", r.ID)
		}
		return nil
	}
}

// checkRolloutReferences refuses a rollout whose protocol names, in promptTemplate.base or extends,
// a template or protocol that exists neither in the rollout itself, nor in the store (any version),
// nor in the binary, as the admin API's POST /admin/rollouts does: such a protocol would fail every
// request it serves. Through the admin API the server makes this check itself. The links between
// workflows and their bases are the store's to check, in the rollout's own transaction.
func checkRolloutReferences(ctx context.Context, st cliStore, r store.Rollout) error {
	own := map[store.Kind]map[string]bool{store.KindTemplate: {}, store.KindProtocol: {}}
	for _, t := range r.Templates {
		own[store.KindTemplate][gjson.GetBytes(t, "name").String()] = true
	}
	for _, p := range r.Protocols {
		own[store.KindProtocol][gjson.GetBytes(p, "id").String()] = true
	}
	for i, p := range r.Protocols {
		if err := checkReferences(ctx, st, p, own, ", nor in this rollout", "an earlier rollout file, or the same one"); err != nil {
			return fmt.Errorf("protocols[%d] (%s): %w", i, gjson.GetBytes(p, "id").String(), err)
		}
	}
	return nil
}

// checkReferences refuses a protocol definition p whose promptTemplate.base or extends names a
// template or protocol that exists neither among own (definitions stored with it), nor in the
// store, nor in the binary; ownName ("", ", nor in this rollout") and addFirst (where to add it)
// word the message. Through the admin API the server makes this check itself.
func checkReferences(ctx context.Context, st cliStore, p []byte, own map[store.Kind]map[string]bool, ownName, addFirst string) error {
	if _, viaAdmin := st.(*adminStore); viaAdmin {
		return nil
	}
	for _, ref := range []struct {
		field string
		kind  store.Kind
		what  string
	}{{"promptTemplate.base", store.KindTemplate, "template"}, {"extends", store.KindProtocol, "protocol"}} {
		v := gjson.GetBytes(p, ref.field)
		if v.Type != gjson.String || v.Str == "" || own[ref.kind][v.Str] {
			continue // a wrong type or a missing base is named by the store's validation
		}
		_, err := st.Entry(ctx, ref.kind, v.Str)
		if errors.Is(err, store.ErrNotFound) {
			if _, ok := store.Fallback(ref.kind, v.Str); ok {
				continue
			}
			return fmt.Errorf("%s: %s %q exists neither in the store%s, nor built into the binary: add it first (%s), or name another",
				ref.field, ref.what, v.Str, ownName, addFirst)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
