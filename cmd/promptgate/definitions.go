package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/promptgate/promptgate/store"
)

// definitions runs `promptgate templates|protocols list|show|history|activate|rollback`.
func definitions(ctx context.Context, kindName string, args []string, stdout, stderr io.Writer, getenv env) error {
	kind := store.KindTemplate
	if kindName == "protocols" {
		kind = store.KindProtocol
	}
	if len(args) == 0 {
		return usageError{kindName + ": give list, show NAME [--version N], history NAME, activate NAME VERSION or rollback NAME"}
	}
	sub := args[0]
	fs := flag.NewFlagSet(kindName+" "+sub, flag.ContinueOnError)
	version := fs.Int("version", 0, "with show: this version instead of the active one")
	admin := fs.String("admin", "", "admin API URL of a running server (token from "+EnvAdminToken+"); used by itself when serve holds the DB")
	sf := addCLIStoreFlags(fs, getenv)
	pos, err := parseFlags(fs, args[1:], stderr)
	if err != nil {
		return err
	}
	want := map[string]int{"list": 0, "show": 1, "history": 1, "activate": 2, "rollback": 1}
	n, ok := want[sub]
	if !ok {
		return usageError{fmt.Sprintf("%s: unknown subcommand %q: give list, show, history, activate or rollback", kindName, sub)}
	}
	if len(pos) != n {
		return usageError{fmt.Sprintf("%s %s takes %d argument(s), got %d", kindName, sub, n, len(pos))}
	}
	st, err := openCLIStore(sf, *admin, getenv, stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	switch sub {
	case "list":
		entries, err := st.List(ctx, kind)
		if err != nil {
			return err
		}
		for _, e := range entries {
			fmt.Fprintf(stdout, "%-32s active %-4d versions %d\n", e.Name, e.Active, len(e.Versions))
		}
		return nil
	case "show":
		var rec store.Record
		if *version > 0 {
			rec, err = st.Get(ctx, kind, pos[0], *version)
		} else {
			rec, err = st.Active(ctx, kind, pos[0])
		}
		if err != nil {
			return err
		}
		return enc.Encode(rec)
	case "history":
		e, err := st.Entry(ctx, kind, pos[0])
		if err != nil {
			return err
		}
		for _, v := range e.Versions {
			mark := " "
			if v.Version == e.Active {
				mark = "*"
			}
			fmt.Fprintf(stdout, "%s %-4d %s  %-10s %s\n", mark, v.Version, v.CreatedAt.Format(time.RFC3339), v.Author, v.Note)
		}
		return nil
	case "activate":
		v, err := strconv.Atoi(pos[1])
		if err != nil || v < 1 {
			return usageError{fmt.Sprintf("%s activate: version %q is not a positive number", kindName, pos[1])}
		}
		prev, err := st.Activate(ctx, kind, pos[0], v)
		if err != nil {
			return err
		}
		switch prev {
		case v:
			fmt.Fprintf(stdout, "%s %s: version %d active (it already was)\n", kindName, pos[0], v)
		case 0:
			fmt.Fprintf(stdout, "%s %s: version %d active (none was)\n", kindName, pos[0], v)
		default:
			fmt.Fprintf(stdout, "%s %s: version %d active (was %d)\n", kindName, pos[0], v, prev)
		}
		return nil
	default:
		v, from, err := st.Rollback(ctx, kind, pos[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s %s: rolled back to version %d (from %d)\n", kindName, pos[0], v, from)
		return nil
	}
}
