package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// writers is how many goroutines write business transactions at once.
const writers = 4

// results are what the summary line of a quick run is made of; the table
// has the rest.
type results struct {
	writeRatio, drain1, drain1Ratio float64
	orderedHot, orderedHotRatio     float64 // the drain of hotAggregates, and its ratio to the unordered tuned one
	hot, cold                       percentiles
	kafka                           float64

	// The log relay's, when it ran (log): its tuned drain, and its ratios
	// to the polling relay's tuned drain and to the raw locking loop; its
	// write path to raw inserts; its latency; its ordered drains to the
	// polling relay's of the same backlogs.
	log                                bool
	walDrain, walVsPoll, walVsLocking  float64
	walWriteRatio                      float64
	walLatency                         percentiles
	walOrderedHotRatio, walOrderedMany float64
}

// summaryLine is the last line of a quick run: the figures the targets
// name, as key=value pairs, the log relay's only when it ran.
func (res *results) summaryLine() string {
	line := fmt.Sprintf("summary: write_ratio=%.2f drain_per_s=%.0f drain_ratio_vs_forwarder=%.2f hot_p50_ms=%.2f hot_p99_ms=%.2f cold_p99_ms=%.2f kafka_drain_per_s=%.0f ordered_hot_per_s=%.0f ordered_hot_ratio=%.2f",
		res.writeRatio, res.drain1, res.drain1Ratio,
		msf(res.hot.p50), msf(res.hot.p99), msf(res.cold.p99), res.kafka, res.orderedHot, res.orderedHotRatio)
	if res.log {
		line += fmt.Sprintf(" wal_drain_per_s=%.0f wal_ratio_vs_poll=%.2f wal_ratio_vs_locking=%.2f wal_write_ratio=%.2f wal_p50_ms=%.2f wal_p99_ms=%.2f wal_ordered_hot_ratio=%.2f wal_ordered_many_ratio=%.2f",
			res.walDrain, res.walVsPoll, res.walVsLocking, res.walWriteRatio,
			msf(res.walLatency.p50), msf(res.walLatency.p99), res.walOrderedHotRatio, res.walOrderedMany)
	}
	return line
}

// run runs the scenarios of only (all with "") in a database of its own,
// which it drops at the end, and returns that database's name. noLog is
// why the server cannot run a log relay, if ensureLogical found it so.
func run(ctx context.Context, server string, sz sizes, only string, quick bool, noLog error) (dbName string, err error) {
	db, err := createDatabase(ctx, server)
	if err != nil {
		return "", err
	}
	defer func() { err = errors.Join(err, db.drop()) }()
	return db.name, runIn(ctx, db, sz, only, quick, noLog)
}

// logScenarios are the scenarios with rows of the log relay.
var logScenarios = []string{"write", "drain", "latency"}

// needsLog reports whether the scenarios of only that sz runs have rows
// of the log relay.
func needsLog(only string, sz sizes) bool {
	return slices.ContainsFunc(selected(only, sz), func(name string) bool { return slices.Contains(logScenarios, name) })
}

func runIn(ctx context.Context, db *database, sz sizes, only string, quick bool, noLog error) error {
	pool, err := db.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	var version string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return err
	}
	mode := "full"
	if quick {
		mode = "quick"
	}
	fmt.Printf("wmoutbox bench (%s): %d CPUs, PostgreSQL %s, %d writers, medians of %d; ≈%d-byte JSON events\n%s\n",
		mode, runtime.NumCPU(), version, writers, sz.reps, len(payload(0)), machineLine())
	why := logUnavailable(ctx, pool)
	if noLog != nil {
		why = noLog.Error()
	}
	if why != "" {
		fmt.Printf("log relay: unavailable (%s); its rows are left out\n", why)
	} else {
		db.logical = true
	}
	fmt.Println()

	cpuAtStart := readCPUTimes()
	others := watchOthers(ctx, pool, db.name)
	defer others.stop()
	rep := &report{}
	res := results{log: db.logical}
	measure := map[string]func() error{
		"write":     func() error { return res.measureWrite(ctx, db, pool, sz, rep) },
		"drain":     func() error { return res.measureDrain(ctx, db, pool, sz, rep) },
		"latency":   func() error { return res.measureLatency(ctx, db, pool, sz, rep) },
		"kafka":     func() error { return res.measureKafka(ctx, db, pool, sz, rep) },
		"memory":    func() error { return measureMemory(ctx, db, sz, rep) },
		"retention": func() error { return measureRetention(ctx, db, pool, sz, rep) },
	}
	for _, name := range selected(only, sz) {
		if err := measure[name](); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	othersLine := others.stop()
	fmt.Println()
	rep.print(os.Stdout)
	if stolen := readCPUTimes().stolenShare(cpuAtStart); stolen >= 0 {
		fmt.Printf("\nsteal: a hypervisor held back %.0f%% of this machine's CPU time during the run; "+
			"with much of it, compare ratios within this run, not figures across runs\n", 100*stolen)
	}
	fmt.Println(othersLine)
	if quick {
		fmt.Println(res.summaryLine())
	}
	return nil
}

// scenarios are the names -only chooses from, in the order they run.
var scenarios = []string{"write", "drain", "latency", "kafka", "memory", "retention"}

// selected is the scenarios whose name contains only (all with "") that
// sz runs: the memory scenario needs a backlog, which -quick does not
// give it.
func selected(only string, sz sizes) []string {
	var chosen []string
	for _, name := range scenarios {
		if strings.Contains(name, only) && (name != "memory" || sz.memory > 0) {
			chosen = append(chosen, name)
		}
	}
	return chosen
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// measureWrite times the raw single-row inserts (one statement at a time,
// and in one round trip, as our InTx sends a transaction that writes an
// event alone) and our write path, in alternation, so that a shared
// machine's drift falls on all alike: with
// the relay delivering to the sink, keeping delivered events and deleting
// them; with the relay of another process, woken by the writers'
// notifications, delivering to it; with a log relay reading the table's
// slot, when the server has logical decoding; and, to tell where the cost lies, with
// the relay delivering to a downstream that costs nothing, with no relay
// at all, and with each committed message delivered through a Watermill
// router with no outbox relay (what any relay feeding a router costs at
// least).
func (res *results) measureWrite(ctx context.Context, db *database, pool *pgxpool.Pool, sz sizes, rep *report) error {
	raw := &series{name: fmt.Sprintf("1 raw: insert, 1 row per transaction, %d writers", writers),
		measure: func() (window, error) { return rawInsert(ctx, pool, sz.writes, writers, false) }}
	oneTrip := &series{name: fmt.Sprintf("1 raw: insert, 1 row per transaction in one round trip, %d writers", writers),
		measure: func() (window, error) { return rawInsert(ctx, pool, sz.writes, writers, true) }}
	all := []*series{raw, oneTrip}
	settings := []writeSetting{
		{name: "relay running, " + doneRows(false), downstream: toSink(ctx)},
		{name: "relay running, " + doneRows(true), downstream: toSink(ctx), deleteDone: true},
		{name: "relay running, forwarding to a publisher that only counts, " + doneRows(false), downstream: toCounter},
		{name: "relay running in another process, woken by the writers' notifications, " + doneRows(false),
			downstream: toSink(ctx), relay: otherProcess},
		{name: "no relay in the process (the writer alone)"},
		{name: "no relay: each committed message forwarded to the sink by a Watermill router from a GoChannel (router delivery alone, no outbox)",
			downstream: toSink(ctx), routerOnly: true},
	}
	if db.logical {
		settings = append(settings, writeSetting{name: "log relay running (another pool, reading the slot, no notifications), " + doneRows(false),
			downstream: toSink(ctx), relay: logReader})
	}
	for _, s := range settings {
		all = append(all, &series{
			name: fmt.Sprintf("2 write: ours, 1 event per transaction, %d writers, %s", writers, s.name),
			measure: func() (window, error) {
				return oursWrite(ctx, db, pool, sz.writes, writers, s)
			}})
	}
	if err := interleave(sz.reps, all...); err != nil {
		return err
	}
	res.writeRatio = all[2].ratioTo(raw)
	if db.logical {
		res.walWriteRatio = all[len(all)-1].ratioTo(raw)
	}
	rep.add(raw, "ceiling of the write path")
	rep.add(oneTrip, oneTrip.comparedTo(raw, "raw insert")+": BEGIN, INSERT and COMMIT in one pgx batch")
	for _, ours := range all[2:] {
		rep.add(ours, ours.comparedTo(raw, "raw insert")+", "+ours.comparedTo(oneTrip, "in one round trip")+walSenderNote(ours))
	}
	return nil
}

// doneRows names what a relay does with delivered events.
func doneRows(deleteDone bool) string {
	if deleteDone {
		return "delivered events deleted"
	}
	return "DONE rows kept"
}

// The relay configurations the drain compares: the defaults (4 events in
// flight, claims of 50) and a setting for
// throughput, as the forwarder is shown default and tuned, keeping DONE
// rows (the default) or deleting delivered events. The tuned claims take
// 1000 events, the tuned forwarder's batch; the cold queue holds two
// claims, so that the next claim need not wait for the queue to empty.
var (
	drainDefault = drainSetting{name: "default (4 workers, batch 50)"}
	drainTuned   = drainSetting{name: "tuned (16 workers, batch 1000)",
		cfg: watermilladapter.SubscriberConfig{WorkerCount: 16, BatchSize: 1000, ColdQueueCapacity: 2000}}
	drainTunedDeleting = drainSetting{name: drainTuned.name + ", " + doneRows(true),
		cfg: drainTuned.cfg, deleteDone: true}
)

// The log relay drains with the tuned relay's setting, whose workers are
// what it uses of it: it claims nothing of a backlog its slot streams.
var (
	logTuned = drainSetting{name: "log relay (slot made before the backlog), 16 workers, " + doneRows(false),
		cfg: drainTuned.cfg, log: true}
	logTunedDeleting = drainSetting{name: "log relay (slot made before the backlog), 16 workers, " + doneRows(true),
		cfg: drainTuned.cfg, deleteDone: true, log: true}
	// logTunedDurable waits for the WAL flush of each batch of outcomes:
	// what a server crash then cannot take back (docs/log-relay.md).
	logTunedDurable = drainSetting{name: logTuned.name + ", synchronous bookkeeping",
		cfg: drainTuned.cfg, syncBookkeeping: true, log: true}
)

// orderedAggregate is the aggregate size of the ordered drain whose
// events wait for the one before them: 10 events in a row per aggregate.
const orderedAggregate = 10

// hotAggregates is the number of aggregates of the ordered drain of hot
// aggregates, whose events are written interleaved, as busy keys' are;
// manyAggregates that of the ordered drain of many aggregates, written
// the same way.
const (
	hotAggregates  = 10
	manyAggregates = 1000
)

// measureDrain times the raw claim loops, the forwarder and ours (the
// polling relay, and the log relay when the server has logical decoding)
// on backlogs of the same size, one repetition of each in turn.
func (res *results) measureDrain(ctx context.Context, db *database, pool *pgxpool.Pool, sz sizes, rep *report) error {
	backlog := thousands(int64(sz.drain))
	rawLease := &series{name: fmt.Sprintf("1 raw: claim 100 (SKIP LOCKED, lease) + mark done, %s rows", backlog),
		measure: func() (window, error) { return rawClaim(ctx, pool, sz.drain, true) }}
	rawLock := &series{name: fmt.Sprintf("1 raw: claim 100 (SKIP LOCKED, locks held) + mark done in one transaction, %s rows", backlog),
		measure: func() (window, error) { return rawClaim(ctx, pool, sz.drain, false) }}
	all := []*series{rawLease, rawLock}
	var fwd []*series
	for _, s := range []forwarderSetting{forwarderDefault, forwarderTuned} {
		fwd = append(fwd, &series{name: fmt.Sprintf("3 drain %s: Watermill forwarder, %s", backlog, s.describe()),
			measure: func() (window, error) { return forwarderDrain(ctx, pool, sz.drain, s) }})
	}
	all = append(all, fwd...)
	drain := func(n, instances int, setting drainSetting) *series {
		return &series{name: fmt.Sprintf("3 drain %s: ours, %d instance(s), %s", thousands(int64(n)), instances, setting.name),
			measure: func() (window, error) {
				return oursDrain(ctx, db, pool, n, instances, setting, toSink(ctx))
			}}
	}
	var ours []*series
	for _, r := range []struct {
		instances int
		setting   drainSetting
	}{{1, drainDefault}, {1, drainTuned}, {4, drainTuned}, {1, drainTunedDeleting},
		{1, drainTuned.ordered(eachOwn)}, {1, drainTuned.ordered(shape{perAggregate: orderedAggregate})}} {
		ours = append(ours, drain(sz.drain, r.instances, r.setting))
	}
	// Hot aggregates: the whole backlog in a few aggregates, each moving
	// at the pace of one relay's hand-offs; and in many.
	hotShapes := []shape{{hot: hotAggregates}, {hot: 1}, {hot: manyAggregates}}
	var hot []*series
	for _, s := range hotShapes {
		hot = append(hot, drain(sz.hotDrain, 1, drainTuned.ordered(s)))
	}
	all = append(all, ours...)
	all = append(all, hot...)
	// The log relay: unordered, keeping DONE rows, deleting them, and
	// waiting for the disk, and ordered over the hot and the many
	// aggregates.
	var logs, logHot []*series
	if db.logical {
		logs = []*series{drain(sz.drain, 1, logTuned), drain(sz.drain, 1, logTunedDeleting), drain(sz.drain, 1, logTunedDurable)}
		logHot = []*series{drain(sz.hotDrain, 1, logTuned.ordered(hotShapes[0])), drain(sz.hotDrain, 1, logTuned.ordered(hotShapes[2]))}
		all = append(all, logs...)
		all = append(all, logHot...)
	}
	if err := interleave(sz.reps, all...); err != nil {
		return err
	}

	res.drain1, res.drain1Ratio = ours[1].median(), ours[1].ratioTo(fwd[1])
	rep.add(rawLease, "ceiling of one drain loop with leases")
	rep.add(rawLock, "ceiling of one drain loop without leases")
	for _, f := range fwd {
		rep.add(f, "")
	}
	unordered, ordered := ours[:4], ours[4:]
	for _, o := range unordered {
		rep.add(o, strings.Join([]string{o.comparedTo(rawLease, "raw lease claim"), o.comparedTo(rawLock, "raw locking claim"),
			o.comparedTo(fwd[1], "forwarder tuned"), o.comparedTo(fwd[0], "forwarder default")}, ", "))
	}
	// The cost of the order: against the same relay unordered, and the
	// forwarder, which delivers in order too (the whole topic's).
	for _, o := range ordered {
		rep.add(o, strings.Join([]string{o.comparedTo(ours[1], "ours tuned unordered"),
			o.comparedTo(fwd[1], "forwarder tuned")}, ", ")+"; order checked at the sink")
	}
	for _, o := range hot {
		rep.add(o, fmt.Sprintf("%s; hand-off to the next event of an aggregate %s; order checked at the sink",
			o.comparedTo(ours[1], "ours tuned unordered"), o.handoffs()))
	}
	res.orderedHot, res.orderedHotRatio = hot[0].median(), hot[0].ratioTo(ours[1])
	if db.logical {
		// The log relay against the polling relay of the same setting, the
		// raw loops and the forwarder.
		for i, o := range logs {
			polling := []*series{ours[1], ours[3], ours[1]}[i]
			vs := []string{o.comparedTo(polling, "polling tuned"), o.comparedTo(rawLock, "raw locking claim"),
				o.comparedTo(rawLease, "raw lease claim"), o.comparedTo(fwd[1], "forwarder tuned")}
			if o != logs[0] {
				vs = append(vs, o.comparedTo(logs[0], "log tuned"))
			}
			rep.add(o, strings.Join(vs, ", ")+walSenderNote(o))
		}
		for i, o := range logHot {
			polling := []*series{hot[0], hot[2]}[i]
			rep.add(o, fmt.Sprintf("%s, %s; hand-off to the next event of an aggregate %s; order checked at the sink",
				o.comparedTo(polling, "polling ordered"), o.comparedTo(logs[0], "log unordered"), o.handoffs())+walSenderNote(o))
		}
		res.walDrain, res.walVsPoll, res.walVsLocking = logs[0].median(), logs[0].ratioTo(ours[1]), logs[0].ratioTo(rawLock)
		res.walOrderedHotRatio, res.walOrderedMany = logHot[0].ratioTo(hot[0]), logHot[1].ratioTo(hot[2])
	}
	for _, s := range slices.Concat(ours, hot, logs, logHot) {
		rep.addVersions(s)
	}
	return nil
}

// walSenderNote says what CPU a log relay's WAL sender used per event,
// part of the database's in the CPU column, when it is known.
func walSenderNote(s *series) string {
	if d := s.walSender(); d > 0 {
		return fmt.Sprintf("; its WAL sender %.1f µs of CPU per event", float64(d)/float64(time.Microsecond))
	}
	return ""
}

func (s forwarderSetting) describe() string {
	return fmt.Sprintf("%s (poll %s, batch %d)", s.name, s.pollInterval, s.batchSize)
}

// measureLatency runs ours on the hot and the cold path, ours ordered,
// and the forwarder taking turns, and reports the median of each
// percentile over the repetitions.
func (res *results) measureLatency(ctx context.Context, db *database, pool *pgxpool.Pool, sz sizes, rep *report) error {
	at := fmt.Sprintf("%d events at %d/s", sz.latencyEvents, latencyRate)
	all := []*latencySeries{
		{name: "4 latency commit→sink: ours, hot path, " + at,
			measure: func() (latencySample, error) {
				return oursLatency(ctx, db, pool, sz.latencyEvents, inProcess, watermilladapter.SubscriberConfig{})
			}},
		{name: "4 latency commit→sink: ours, cold path (other process, poll 5s), " + at, note: "woken by the writer's notification",
			measure: func() (latencySample, error) {
				return oursLatency(ctx, db, pool, sz.latencyEvents, otherProcess, watermilladapter.SubscriberConfig{})
			}},
		{name: "4 latency commit→sink: ours, ordered, every event its own aggregate (same process, no hot path), " + at,
			note: "claimed when its Publisher wakes the relay at the commit",
			measure: func() (latencySample, error) {
				return oursLatency(ctx, db, pool, sz.latencyEvents, inProcess, watermilladapter.SubscriberConfig{Ordered: true})
			}},
	}
	var logLatency *latencySeries
	if db.logical {
		logLatency = &latencySeries{name: "4 latency commit→sink: ours, log relay (other process, no notifications), " + at,
			note: "streamed from the slot",
			measure: func() (latencySample, error) {
				return oursLatency(ctx, db, pool, sz.latencyEvents, logReader, watermilladapter.SubscriberConfig{})
			}}
		all = append(all, logLatency)
	}
	for _, s := range []forwarderSetting{forwarderTuned, forwarderDefault} {
		all = append(all, &latencySeries{name: "4 latency commit→sink: forwarder " + s.describe() + ", " + at,
			measure: func() (latencySample, error) {
				return forwarderLatency(ctx, pool, latencyRate, sz.latencyEvents, s)
			}})
	}
	err := takeTurns(sz.reps, len(all), func(i int) error {
		l := all[i]
		sample, err := l.measure()
		if err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		l.runs = append(l.runs, latencyOf(sample.latencies))
		l.duplicates += sample.duplicates
		return nil
	})
	if err != nil {
		return err
	}
	res.hot, res.cold = all[0].median(), all[1].median()
	if logLatency != nil {
		res.walLatency = logLatency.median()
	}
	for _, l := range all {
		rep.addValue(l.name, l.median().String(), withDuplicates(l.note, l.duplicates))
	}
	return nil
}

// kafkaSettings keep enough events in flight for the producer to fill its
// batches (each worker waits for the broker's acknowledgement), with the
// drain's tuned claims.
var kafkaSettings = watermilladapter.SubscriberConfig{WorkerCount: 256,
	BatchSize: drainTuned.cfg.BatchSize, ColdQueueCapacity: drainTuned.cfg.ColdQueueCapacity}

func (res *results) measureKafka(ctx context.Context, db *database, pool *pgxpool.Pool, sz sizes, rep *report) error {
	var all []*series
	for _, deleteDone := range []bool{false, true} {
		setting := drainSetting{cfg: kafkaSettings, deleteDone: deleteDone}
		all = append(all, &series{
			name: fmt.Sprintf("5 drain %s to Kafka (kafkaforward → kfake): ours, 1 instance, %s", thousands(int64(sz.kafka)), doneRows(deleteDone)),
			measure: func() (window, error) {
				return oursDrain(ctx, db, pool, sz.kafka, 1, setting, toKafka(ctx))
			}})
	}
	if err := interleave(sz.reps, all...); err != nil {
		return err
	}
	res.kafka = all[0].median()
	for _, s := range all {
		rep.add(s, "acks=all, idempotent")
	}
	return nil
}

func measureMemory(ctx context.Context, db *database, sz sizes, rep *report) error {
	m, err := memoryDrain(ctx, db, sz.memory)
	if err != nil {
		return err
	}
	rep.addValue(fmt.Sprintf("6 memory: drain %s backlog, relay process", thousands(int64(sz.memory))),
		fmt.Sprintf("peak RSS %.0f MB", float64(m.peakRSSKB)*1024/1e6),
		withDuplicates(fmt.Sprintf("drained in %.1f s (%s)", m.drain.Seconds(), rate(float64(sz.memory)/m.drain.Seconds())), m.duplicates))
	return nil
}
