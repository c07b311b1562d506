package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// memoryDrain fills a backlog of n events, then drains it with a relay in
// a process of its own (this program, re-executed) so that the peak
// resident set size the kernel reports is the relay's alone.
func memoryDrain(ctx context.Context, db *database, n int) (rss int64, elapsed time.Duration, err error) {
	pool, err := db.pool(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	table, drop, err := freshTable(ctx, pool, "bench_memory")
	if err != nil {
		return 0, 0, err
	}
	defer drop()
	w, err := newWriter(pool, table)
	if err != nil {
		return 0, 0, err
	}
	defer func() { err = errors.Join(err, w.close()) }()
	if err := w.fill(ctx, 0, n); err != nil {
		return 0, 0, err
	}
	if err := analyze(ctx, pool, table.Table); err != nil {
		return 0, 0, err
	}

	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.CommandContext(ctx, self, "-memory-relay", db.url, "-memory-table", table.Table, "-memory-events", strconv.Itoa(n))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("memory relay process: %w", err)
	}
	elapsed = time.Since(start)
	usage, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, 0, errors.New("no resource usage for the relay process")
	}
	return usage.Maxrss * 1024, elapsed, nil // Linux reports kilobytes
}

// runMemoryRelay is the relay process of memoryDrain: it relays table's
// events to a sink until n have arrived.
func runMemoryRelay(url, table string, n int) (err error) {
	ctx := context.Background()
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
	r, err := startRelay(ctx, pool, postgres.Config{Table: table}, snk.pub, drainSettings[1].cfg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.close()) }()
	if err := t.wait(ctx, nil); err != nil {
		return err
	}
	return t.check("memory")
}
