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

// memoryReport is what the memory scenario's relay process reports: its
// peak resident set size, the time of its drain, from its relay's start to
// the relay stopped with every outcome recorded (as the drain scenario
// times ours, without the process's start, dialling and exit), and the
// deliveries that repeated an event.
type memoryReport struct {
	peakRSSKB  int64
	drain      time.Duration
	duplicates int
}

// memoryReportFormat is the relay process's report on stdout.
const memoryReportFormat = "peak_rss_kb=%d drain_ns=%d duplicates=%d\n"

func (m memoryReport) String() string {
	return fmt.Sprintf(memoryReportFormat, m.peakRSSKB, m.drain.Nanoseconds(), m.duplicates)
}

func parseMemoryReport(out string) (memoryReport, error) {
	var (
		m       memoryReport
		drainNS int64
	)
	if _, err := fmt.Sscanf(out, memoryReportFormat, &m.peakRSSKB, &drainNS, &m.duplicates); err != nil {
		return memoryReport{}, fmt.Errorf("report %q: %w", out, err)
	}
	m.drain = time.Duration(drainNS)
	return m, nil
}

// memoryDrain fills a backlog of n events, then drains it with a relay in
// a process of its own (this program, re-executed) so that the peak
// resident set size is the relay's alone. The relay reads it from the
// kernel itself (VmHWM): the rusage of a child started with vfork counts
// the parent's resident set at the exec, which is this program's, after
// the other scenarios.
func memoryDrain(ctx context.Context, db *database, n int) (memoryReport, error) {
	pool, err := db.pool(ctx)
	if err != nil {
		return memoryReport{}, err
	}
	defer pool.Close()
	table, drop, err := backlogTable(ctx, pool, "bench_memory", n, eachOwn)
	if err != nil {
		return memoryReport{}, err
	}
	defer drop()

	self, err := os.Executable()
	if err != nil {
		return memoryReport{}, err
	}
	cmd := exec.CommandContext(ctx, self, "-memory-relay", db.url, "-memory-table", table.Table, "-memory-events", strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	// The relay process stops when its standard input ends: when this
	// process exits, however it exits, the pipe's write end closes with it.
	parentAlive, err := cmd.StdinPipe()
	if err != nil {
		return memoryReport{}, err
	}
	defer parentAlive.Close()
	out, err := cmd.Output()
	if err != nil {
		return memoryReport{}, fmt.Errorf("memory relay process: %w", err)
	}
	m, err := parseMemoryReport(string(out))
	if err != nil {
		return memoryReport{}, fmt.Errorf("memory relay process: %w", err)
	}
	return m, nil
}

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
	start := time.Now()
	// The tuned setting holds the most events in memory at once.
	r, err := startRelay(ctx, pool, postgres.Config{Table: table}, snk.pub, drainTuned.cfg)
	if err != nil {
		return err
	}
	if err := t.wait(ctx, nil); err != nil {
		return errors.Join(err, r.close())
	}
	// As in the drain scenario: the drain ends with the relay stopped,
	// every outcome recorded.
	if err := r.close(); err != nil {
		return err
	}
	drain := time.Since(start)
	if err := requireRecorded(ctx, pool, table, n); err != nil {
		return err
	}
	if err := t.check("memory"); err != nil {
		return err
	}
	kb, err := peakRSSKB()
	if err != nil {
		return err
	}
	_, err = fmt.Print(memoryReport{peakRSSKB: kb, drain: drain, duplicates: t.duplicates()})
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
