package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/promptgate/promptgate/store"
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
	sf := addStoreFlags(fs, getenv)
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
		for k, v := range r.Previous {
			if v == 0 {
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
