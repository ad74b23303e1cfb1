package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/promptgate/promptgate/proxy"
	"github.com/promptgate/promptgate/store"
)

// definitions runs `promptgate templates|protocols list|show|history|activate|rollback|push` and,
// for protocols, `shadow NAME VERSION` and `unshadow NAME`.
func definitions(ctx context.Context, kindName string, args []string, stdout, stderr io.Writer, getenv env) error {
	kind := store.KindTemplate
	if kindName == "protocols" {
		kind = store.KindProtocol
	}
	if len(args) == 0 {
		return usageError{kindName + ": give list, show NAME [--version N], history NAME, activate NAME VERSION, rollback NAME or push FILE [--activate]"}
	}
	sub := args[0]
	fs := flag.NewFlagSet(kindName+" "+sub, flag.ContinueOnError)
	version := fs.Int("version", 0, "with show: this version instead of the active one")
	activate := fs.Bool("activate", false, "with push: make the new version active")
	note := fs.String("note", "", "with push: a note stored with the new version")
	admin := fs.String("admin", "", "admin API URL of a running server (token from "+EnvAdminToken+"); used by itself when serve holds the DB")
	sf := addCLIStoreFlags(fs, getenv)
	pos, err := parseFlags(fs, args[1:], stderr)
	if err != nil {
		return err
	}
	want := map[string]int{"list": 0, "show": 1, "history": 1, "activate": 2, "rollback": 1, "push": 1}
	subs := "list, show, history, activate, rollback or push"
	if kind == store.KindProtocol {
		want["shadow"], want["unshadow"] = 2, 1
		subs = "list, show, history, activate, rollback, push, shadow or unshadow"
	}
	n, ok := want[sub]
	if !ok {
		return usageError{fmt.Sprintf("%s: unknown subcommand %q: give %s", kindName, sub, subs)}
	}
	if len(pos) != n {
		return usageError{fmt.Sprintf("%s %s takes %d argument(s), got %d", kindName, sub, n, len(pos))}
	}
	if err := onlyWith(fs, sub, map[string]string{"version": "show", "activate": "push", "note": "push"}); err != nil {
		return err
	}
	var body []byte
	if sub == "push" {
		// The file is read and checked before any store is opened: a bad file changes nothing
		// anywhere.
		if body, err = readDefinition(kind, kindName, pos[0]); err != nil {
			return err
		}
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
			fmt.Fprintf(stdout, "%-32s active %-4d versions %d", e.Name, e.Active, len(e.Versions))
			if e.Shadow != 0 {
				fmt.Fprintf(stdout, " shadow %d", e.Shadow)
			}
			fmt.Fprintln(stdout)
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
			switch v.Version {
			case e.Active:
				mark = "*"
			case e.Shadow:
				mark = "s" // in shadow
			}
			fmt.Fprintf(stdout, "%s %-4d %s  %-10s %s\n", mark, v.Version, v.CreatedAt.Format(time.RFC3339), v.Author, v.Note)
		}
		return nil
	case "push":
		return push(ctx, st, kind, kindName, pos[0], body, *activate, *note, stdout)
	case "shadow", "unshadow":
		return shadow(ctx, st, sub, pos, stdout)
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

// shadow runs `protocols shadow NAME VERSION` (the version judges every request of the protocol
// beside the active one, for the record) and `protocols unshadow NAME`.
func shadow(ctx context.Context, st cliStore, sub string, pos []string, stdout io.Writer) error {
	v := 0
	if sub == "shadow" {
		n, err := strconv.Atoi(pos[1])
		if err != nil || n < 1 {
			return usageError{fmt.Sprintf("protocols shadow: version %q is not a positive number", pos[1])}
		}
		v = n
	}
	prev, err := st.SetShadow(ctx, pos[0], v)
	if err != nil {
		return fmt.Errorf("protocols %s: %w", sub, err)
	}
	switch {
	case v == 0:
		fmt.Fprintf(stdout, "protocols %s: version %d is no longer in shadow\n", pos[0], prev)
	case prev == v:
		fmt.Fprintf(stdout, "protocols %s: version %d in shadow (it already was)\n", pos[0], v)
	case prev == 0:
		fmt.Fprintf(stdout, "protocols %s: version %d in shadow: it judges every request beside the active version, for the record\n", pos[0], v)
	default:
		fmt.Fprintf(stdout, "protocols %s: version %d in shadow (was %d)\n", pos[0], v, prev)
	}
	return nil
}

// onlyWith refuses a flag given to a subcommand it does not belong to (flag name -> its
// subcommand).
func onlyWith(fs *flag.FlagSet, sub string, owners map[string]string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if owner, ok := owners[f.Name]; ok && owner != sub && err == nil {
			err = usageError{fmt.Sprintf("--%s goes with %s, not with %s", f.Name, owner, sub)}
		}
	})
	return err
}

// maxDefinitionFile bounds a definition file that push reads.
const maxDefinitionFile = 10 << 20

// readDefinition reads a template or protocol definition from file and checks it as the store will:
// its structure, then its meaning (every problem named by its key path). A definition of the other
// kind is named as such.
func readDefinition(kind store.Kind, kindName, file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%s push: %w", kindName, err)
	}
	defer f.Close()
	body, err := io.ReadAll(io.LimitReader(f, maxDefinitionFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s push: %s: %w", kindName, file, err)
	}
	if len(body) > maxDefinitionFile {
		return nil, fmt.Errorf("%s push: %s is larger than %d bytes", kindName, file, maxDefinitionFile)
	}
	name, err := store.CheckStructure(kind, body)
	if err != nil {
		if other := otherKind(kind, body); other != "" {
			return nil, fmt.Errorf("%s push: %s: %w (the file looks like a %s definition: use `promptgate %s push`)", kindName, file, err, strings.TrimSuffix(other, "s"), other)
		}
		return nil, fmt.Errorf("%s push: %s: %w", kindName, file, err)
	}
	if err := proxy.ValidateDefinition(kind, name, body); err != nil {
		return nil, fmt.Errorf("%s push: %s: %w", kindName, file, err)
	}
	return body, nil
}

// otherKind is the kind a body that failed as kind looks like ("" when it looks like neither): a
// template has name and text, a protocol an id.
func otherKind(kind store.Kind, body []byte) string {
	root := gjson.ParseBytes(body)
	switch {
	case kind == store.KindProtocol && root.Get("name").Exists() && root.Get("text").Exists():
		return "templates"
	case kind == store.KindTemplate && root.Get("id").Exists():
		return "protocols"
	}
	return ""
}

// push stores body (read from file) as a new version and, with activate, makes it the active one.
func push(ctx context.Context, st cliStore, kind store.Kind, kindName, file string, body []byte, activate bool, note string, stdout io.Writer) error {
	name, _ := store.CheckStructure(kind, body) // checked by readDefinition
	if kind == store.KindProtocol {
		if err := checkReferences(ctx, st, body, nil, "", "push it first"); err != nil {
			return fmt.Errorf("%s push: %s: %w", kindName, file, err)
		}
	}
	if note == "" {
		note = "pushed from " + filepath.Base(file)
	}
	v, err := st.AddVersion(ctx, kind, body, "cli", note)
	if err != nil {
		return fmt.Errorf("%s push: %s: %w", kindName, file, err)
	}
	if !activate {
		fmt.Fprintf(stdout, "%s %s: version %d stored, not active (make it active with: promptgate %s activate %s %d)\n", kindName, name, v, kindName, name, v)
		return nil
	}
	prev, err := st.Activate(ctx, kind, name, v)
	if err != nil {
		return fmt.Errorf("%s push: %s: version %d stored, but not activated: %w", kindName, file, v, err)
	}
	switch prev {
	case 0:
		fmt.Fprintf(stdout, "%s %s: version %d stored and active (none was)\n", kindName, name, v)
	default:
		fmt.Fprintf(stdout, "%s %s: version %d stored and active (was %d)\n", kindName, name, v, prev)
	}
	return nil
}
