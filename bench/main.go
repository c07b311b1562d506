// Command bench measures wmoutbox side by side with what users would pick
// instead: hand-written SQL (the raw limits of the database) and
// Watermill's own outbox, the forwarder component on watermill-sql. Every
// scenario runs in one process, on one database server, with one event
// shape, and prints the median of its repetitions next to the ratios that
// matter. See README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"
)

const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// sizes of one run.
type sizes struct {
	reps          int           // repetitions of each throughput scenario
	writes        int           // events per write-path repetition
	drain         int           // backlog drained per repetition
	hotDrain      int           // backlog of the ordered drains of hot aggregates
	latencyEvents int           // events per latency run, at latencyRate
	kafka         int           // backlog drained to Kafka per repetition
	memory        int           // backlog of the memory scenario; 0 skips it
	retention     time.Duration // measured flow of the retention scenario
}

var (
	fullSizes  = sizes{reps: 3, writes: 20_000, drain: 200_000, hotDrain: 20_000, latencyEvents: 5_000, kafka: 200_000, memory: 1_000_000, retention: 30 * time.Second}
	quickSizes = sizes{reps: 3, writes: 1_500, drain: 10_000, hotDrain: 20_000, latencyEvents: 600, kafka: 10_000, retention: 5 * time.Second}
)

// latencyRate is the paced write rate of the latency scenarios, events/s.
const latencyRate = 500

func main() {
	if err := runProgram(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// runProgram is main, returning its error so that the deferred calls, the
// CPU profile's end among them, run before the program exits.
func runProgram() error {
	quick := flag.Bool("quick", false, "run a reduced version (about two minutes) and end with a summary line")
	url := flag.String("database-url", envOr("BENCH_DATABASE_URL", defaultDatabaseURL),
		"PostgreSQL server to use; the program creates its own database there and drops it at the end")
	only := flag.String("only", "", "run only the scenarios whose name contains this (write, drain, latency, kafka, memory, retention)")
	memoryChild := flag.String("memory-relay", "", "internal: run as the memory scenario's relay process on this database URL")
	memoryTable := flag.String("memory-table", "", "internal: the memory relay process's outbox table")
	memoryEvents := flag.Int("memory-events", 0, "internal: events the memory relay process waits for")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run to this file")
	reps := flag.Int("reps", 0, "repetitions of each throughput scenario (default 3)")
	flag.Parse()

	if *memoryChild != "" {
		if err := runMemoryRelay(*memoryChild, *memoryTable, *memoryEvents); err != nil {
			return fmt.Errorf("memory relay: %w", err)
		}
		return nil
	}

	sz := fullSizes
	if *quick {
		sz = quickSizes
	}
	if *reps > 0 {
		sz.reps = *reps
	}
	if len(selected(*only, sz)) == 0 {
		return noScenario(*only, *quick)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *cpuProfile != "" {
		stopProfile, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	// The log relay's rows need logical decoding, which ensureLogical
	// arranges on a server of this machine by restarting it: before the
	// program opens any connection.
	var noLog error
	if needsLog(*only, sz) {
		noLog = ensureLogical(ctx, *url)
	}
	_, err := run(ctx, *url, sz, *only, *quick, noLog)
	return err
}

// noScenario is the error of an -only that selects nothing to run, rather
// than an empty table.
func noScenario(only string, quick bool) error {
	if quick && strings.Contains("memory", only) { //nolint:gocritic // -only is a part of a scenario's name: "mem" selects "memory"
		return fmt.Errorf("-only %q: -quick skips the memory scenario (a 1M backlog); run it without -quick", only)
	}
	return fmt.Errorf("-only %q selects none of the scenarios %s", only, strings.Join(scenarios, ", "))
}

func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// warnLogger is the logger of the library's parts that log their start
// at info: warnings and errors reach stderr, beside the table.
var warnLogger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
