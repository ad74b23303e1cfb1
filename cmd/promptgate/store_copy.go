package main

import (
	"context"

	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/promptgate/promptgate/store"
	"github.com/promptgate/promptgate/store/etcdstore"
)

// dumper is a store that `store copy` can read and write whole.
type dumper interface {
	Export(ctx context.Context) (*store.Dump, error)
	Import(ctx context.Context, d *store.Dump) error
	Close() error
}

// storeCmd runs `promptgate store copy --from SPEC --to SPEC [--force]`.
func storeCmd(ctx context.Context, args []string, stdout, stderr io.Writer, getenv env) error {
	if len(args) == 0 || args[0] != "copy" {
		return usageError{"store: give copy --from SPEC --to SPEC [--force] (SPEC: " + storeForms + ")"}
	}
	fs := flag.NewFlagSet("store copy", flag.ContinueOnError)
	from := fs.String("from", "", "source store: bbolt:PATH or etcd://HOST:PORT[,HOST:PORT]/PREFIX")
	to := fs.String("to", "", "destination store, same forms; must be empty (a missing file, a prefix without keys) unless --force")
	force := fs.Bool("force", false, "replace everything in a non-empty destination (an etcd prefix holding only an interrupted copy is replaced without it)")
	pos, err := parseFlags(fs, args[1:], stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError{fmt.Sprintf("store copy takes no arguments, got %q", pos)}
	}
	if *from == "" || *to == "" {
		return usageError{"store copy: give both --from and --to (" + storeForms + ")"}
	}
	src, err := parseStoreSpec("--from", *from, "")
	if err != nil {
		return err
	}
	dst, err := parseStoreSpec("--to", *to, "")
	if err != nil {
		return err
	}
	if src.String() == dst.String() {
		return usageError{fmt.Sprintf("store copy: --from and --to are the same store (%s)", src)}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	in, err := openDumper(ctx, src, true, getenv)
	if err != nil {
		return fmt.Errorf("store copy: --from %s: %w", src, err)
	}
	d, err := in.Export(ctx)
	_ = in.Close()
	if err != nil {
		return fmt.Errorf("store copy: --from %s: %w", src, err)
	}
	if len(d.Defs) == 0 {
		return fmt.Errorf("store copy: --from %s: %w (nothing to copy)", src, errStoreEmpty)
	}
	if !dst.etcd() && !*force {
		if _, err := os.Stat(dst.boltPath); err == nil {
			return fmt.Errorf("store copy: --to %s: the file exists; give --force to replace everything in it", dst)
		}
	}
	out, err := openDumper(ctx, dst, false, getenv)
	if err != nil {
		return fmt.Errorf("store copy: --to %s: %w", dst, err)
	}
	defer out.Close()
	if e, ok := out.(*etcdstore.Etcd); ok {
		empty, err := e.Empty(ctx)
		if err != nil {
			return fmt.Errorf("store copy: --to %s: %w", dst, err)
		}
		interrupted := false
		if !empty {
			if interrupted, err = e.Interrupted(ctx); err != nil {
				return fmt.Errorf("store copy: --to %s: %w", dst, err)
			}
		}
		switch {
		case interrupted:
			fmt.Fprintf(stderr, "store copy: --to %s holds an interrupted copy; replacing it\n", dst)
		case !empty && !*force:
			return fmt.Errorf("store copy: --to %s: the prefix holds keys (definitions of a fleet, or another program's); give --force to replace everything under it", dst)
		}
	}
	if err := out.Import(ctx, d); err != nil {
		return fmt.Errorf("store copy: --to %s: %w", dst, err)
	}
	versions := 0
	for _, def := range d.Defs {
		versions += len(def.Versions)
	}
	fmt.Fprintf(stdout, "copied %d definitions (%d versions), %d applied rollouts, %d tool overrides from %s to %s\n",
		len(d.Defs), versions, len(d.Rollouts), len(d.Tools), src, dst)
	return nil
}

// openDumper opens a store for copying: a source bbolt file read-only (it must exist), an etcd
// prefix without seeding it.
func openDumper(ctx context.Context, spec storeSpec, source bool, getenv env) (dumper, error) {
	if !spec.etcd() {
		if source {
			if _, err := os.Stat(spec.boltPath); err != nil {
				return nil, err
			}
		}
		return store.Open(spec.boltPath, store.Options{ReadOnly: source})
	}
	o, err := etcdOptions(spec, getenv)
	if err != nil {
		return nil, err
	}
	o.NoSeed = true
	s, err := etcdstore.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return s, nil
}
