package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// memoryDrain fills a backlog of n events, then drains it with a relay in
// a process of its own (this program, re-executed) so that the peak
// resident set size is the relay's alone. The relay reads it from the
// kernel itself (VmHWM): the rusage of a child started with vfork counts
// the parent's resident set at the exec, which is this program's, after
// the other scenarios.
func memoryDrain(ctx context.Context, db *database, n int) (rss int64, elapsed time.Duration, err error) {
	pool, err := db.pool(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	table, drop, err := backlogTable(ctx, pool, "bench_memory", n)
	if err != nil {
		return 0, 0, err
	}
	defer drop()

	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.CommandContext(ctx, self, "-memory-relay", db.url, "-memory-table", table.Table, "-memory-events", strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	// The relay process stops when its standard input ends: when this
	// process exits, however it exits, the pipe's write end closes with it.
	parentAlive, err := cmd.StdinPipe()
	if err != nil {
		return 0, 0, err
	}
	defer parentAlive.Close()
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		return 0, 0, fmt.Errorf("memory relay process: %w", err)
	}
	elapsed = time.Since(start)
	var kb int64
	if _, err := fmt.Sscanf(string(out), peakRSSFormat, &kb); err != nil {
		return 0, 0, fmt.Errorf("memory relay process: peak RSS from %q: %w", out, err)
	}
	return kb * 1024, elapsed, nil
}

// peakRSSFormat is the relay process's report on stdout.
const peakRSSFormat = "peak_rss_kb=%d\n"

// peakRSSKB returns this process's peak resident set size in kilobytes.
func peakRSSKB() (int64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, errors.New("no VmHWM in /proc/self/status")
}

// runMemoryRelay is the relay process of memoryDrain: it relays table's
// events to a sink until n have arrived, or until its standard input ends
// (the program that started it is gone).
func runMemoryRelay(url, table string, n int) (err error) {
	ctx, cancel := untilEOF(context.Background(), os.Stdin)
	defer cancel()
	db := &database{url: url}
	pool, err := db.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	t := newTally(n)
	snk, err := startSink(ctx, sinkTopic, t.recv)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, snk.close()) }()
	// The tuned setting holds the most events in memory at once.
	r, err := startRelay(ctx, pool, postgres.Config{Table: table}, snk.pub, drainTuned.cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.close()) }()
	if err := t.wait(ctx, nil); err != nil {
		return err
	}
	if err := t.check("memory"); err != nil {
		return err
	}
	kb, err := peakRSSKB()
	if err != nil {
		return err
	}
	_, err = fmt.Printf(peakRSSFormat, kb)
	return err
}

var errParentGone = errors.New("standard input ended: the bench program is gone")

// untilEOF returns a context that ends when r reaches its end or fails.
func untilEOF(parent context.Context, r io.Reader) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		_, err := io.Copy(io.Discard, r)
		cancel(errors.Join(errParentGone, err))
	}()
	return ctx, func() { cancel(context.Canceled) }
}
