package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit codes; see the package documentation.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
	// exitFound is for checks that find what they look for (stats
	// --fail-if).
	exitFound = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// command is a subcommand, a leaf with an action or a group of
// subcommands.
type command struct {
	name    string
	args    string // the arguments after the name, for the usage line
	summary string // one line, for the list of commands
	help    string // more, for the command's -h; may be empty
	sub     []*command
	// setup registers the command's own flags on fs and returns what runs
	// it; nil for a group.
	setup func(fs *flag.FlagSet) action
}

// action runs a command with the arguments left after its flags.
type action func(ctx context.Context, c *cli, args []string) error

// commands is the command table: add a subcommand here.
var commands = []*command{
	migrateCommand,
	statsCommand,
	deadCommand,
	eventsCommand,
	purgeCommand,
	serveCommand,
}

// cli is one run of the command: where it reads and writes, its
// environment and the global flags.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// terminal reports whether stdin is a terminal, where a person can
	// answer a confirmation.
	terminal func() bool
	// listening, when set, is told the address serve listens on.
	listening func(addr string)
	globals   globals
}

// globals are the flags every command takes, before or after its name.
type globals struct {
	databaseURL string
	schema      string
	table       string
	json        bool
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.databaseURL, "database-url", g.databaseURL,
		"database `URL`: postgres://…, mysql://…, sqlite:PATH (default $DATABASE_URL)")
	fs.StringVar(&g.schema, "schema", g.schema, "PostgreSQL `schema` of the outbox table (default: the search_path)")
	fs.StringVar(&g.table, "table", g.table, "outbox `table` name")
	fs.BoolVar(&g.json, "json", g.json, "write JSON instead of a table")
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// foundError tells that a check found what it looks for: exit code 3.
type foundError struct{ msg string }

func (e *foundError) Error() string { return e.msg }

// run runs the command line args (without the program name) and returns
// the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{
		stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv,
		terminal: func() bool { return isTerminal(stdin) },
	}
	return c.run(ctx, args)
}

// isTerminal reports whether r is a terminal (a character device).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// run runs the command line args and returns the exit code.
func (c *cli) run(ctx context.Context, args []string) int {
	c.globals = globals{table: defaultTable}
	stderr := c.stderr
	err := c.dispatch(ctx, nil, commands, args)
	var usage *usageError
	var found *foundError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "wmoutbox: %v\n", err)
		fmt.Fprintf(stderr, "Run 'wmoutbox -h' for usage.\n")
		return exitUsage
	case errors.As(err, &found):
		fmt.Fprintf(stderr, "wmoutbox: %v\n", err)
		return exitFound
	default:
		fmt.Fprintf(stderr, "wmoutbox: %v\n", err)
		return exitError
	}
}

// dispatch parses the global flags and the name of a command of list,
// then runs it, or dispatches among its subcommands. path is the names
// that led here.
func (c *cli) dispatch(ctx context.Context, path []string, list []*command, args []string) error {
	fs := c.flagSet(strings.Join(append([]string{"wmoutbox"}, path...), " "), func(w io.Writer) {
		c.groupUsage(w, path, list)
	})
	if err := fs.Parse(args); err != nil {
		return c.flagError(err)
	}
	if fs.NArg() == 0 {
		c.groupUsage(c.stderr, path, list)
		if len(path) == 0 {
			return usagef("no command given")
		}
		return usagef("%s: no subcommand given", strings.Join(path, " "))
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	for _, cmd := range list {
		if cmd.name != name {
			continue
		}
		path := append(path, name)
		if cmd.sub != nil {
			return c.dispatch(ctx, path, cmd.sub, rest)
		}
		return c.runLeaf(ctx, path, cmd, rest)
	}
	if len(path) == 0 {
		return usagef("unknown command %q", name)
	}
	return usagef("%s: unknown subcommand %q", strings.Join(path, " "), name)
}

func (c *cli) runLeaf(ctx context.Context, path []string, cmd *command, args []string) error {
	name := "wmoutbox " + strings.Join(path, " ")
	var act action
	fs := c.flagSet(name, func(w io.Writer) {
		fmt.Fprintf(w, "Usage: %s [flags] %s\n\n%s\n", name, cmd.args, cmd.summary)
		if cmd.help != "" {
			fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(cmd.help))
		}
		fmt.Fprintf(w, "\nFlags (global flags may also come before %q):\n", path[0])
	})
	act = cmd.setup(fs)
	if err := fs.Parse(args); err != nil {
		return c.flagError(err)
	}
	return act(ctx, c, fs.Args())
}

// flagSet returns a flag set with the global flags, whose -h prints
// header's text and the flags.
func (c *cli) flagSet(name string, header func(io.Writer)) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		header(c.stderr)
		fs.PrintDefaults()
	}
	c.globals.register(fs)
	return fs
}

// flagError makes an error of the flag package a usage error; the flag
// package printed it, and the usage, already.
func (c *cli) flagError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &usageError{msg: err.Error()}
}

func (c *cli) groupUsage(w io.Writer, path []string, list []*command) {
	prefix := strings.Join(append([]string{"wmoutbox"}, path...), " ")
	fmt.Fprintf(w, "Usage: %s [global flags] <command> [flags] [arguments]\n\n", prefix)
	if len(path) == 0 {
		fmt.Fprint(w, "wmoutbox inspects and maintains a wmoutbox outbox table.\n\n")
	}
	fmt.Fprint(w, "Commands:\n")
	tw := newTabWriter(w)
	for _, cmd := range list {
		fmt.Fprintf(tw, "  %s\t%s\n", cmd.name, cmd.summary)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nRun '%s <command> -h' for a command's flags.\n", prefix)
	if len(path) == 0 {
		fmt.Fprint(w, exitCodesHelp)
	}
	fmt.Fprint(w, "\nGlobal flags (before or after the command):\n")
}

const exitCodesHelp = `
Exit codes:
  0  success
  1  error (the database could not be reached, a statement failed, ...)
  2  usage: bad flags or arguments, an unusable --database-url, or a
     confirmation needed where standard input is not a terminal
  3  a check found what it looks for (stats --fail-if-dead, --fail-if-oldest)
`
