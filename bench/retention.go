package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The retention scenario's schedule: DONE events are kept retentionDone,
// and Retain runs every retentionInterval, so that the table holds a few
// seconds of the flow, however long the flow runs.
const (
	retentionDone     = 2 * time.Second
	retentionInterval = time.Second
	retentionPerTx    = 10 // events per business transaction
	// retentionRate is the flow, in events per second, paced below what
	// the relay delivers on two cores: a flow faster than the relay grows
	// a backlog, which retention does not touch.
	retentionRate = 2000
	// retentionVacuum is how often the scenario vacuums the table, as
	// autovacuum would (a purge frees rows, a vacuum their space for new
	// ones): the servers the program runs on may have autovacuum off,
	// and its checks come once a minute (autovacuum_naptime) otherwise.
	retentionVacuum = 5 * time.Second
)

// tableSize is the outbox table's rows and its size on disk, indexes and
// TOAST included (pg_total_relation_size).
type tableSize struct {
	rows, bytes int64
}

func (s tableSize) String() string {
	return fmt.Sprintf("%s rows, %.1f MB", thousands(s.rows), float64(s.bytes)/(1<<20))
}

func readTableSize(ctx context.Context, pool *pgxpool.Pool, table string) (tableSize, error) {
	var s tableSize
	name := pgx.Identifier{table}.Sanitize()
	err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+name+"), pg_total_relation_size($1)", name).Scan(&s.rows, &s.bytes)
	return s, err
}

// measureRetention runs a flow of events through a relay for sz.retention
// (writers committing retentionRate events a second, the relay delivering
// to a publisher that only counts, DONE rows kept) with Store.Retain purging
// DONE events older than retentionDone every retentionInterval, and
// reports the table's rows and size once the flow has run one warm-up
// period (when the table holds what the schedule keeps), at its largest
// since, and at the end: the table stays the same size while the events
// written through it grow. The table is vacuumed every retentionVacuum,
// standing in for autovacuum.
func measureRetention(ctx context.Context, db *database, pool *pgxpool.Pool, sz sizes, rep *report) (err error) {
	table, drop, err := freshTable(ctx, pool, "bench_retention")
	if err != nil {
		return err
	}
	defer drop()
	var delivered atomic.Int64
	down, closeDown, err := toCounter(func(*message.Message) { delivered.Add(1) })
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeDown()) }()
	store, pub, closeOutbox, err := startOutbox(ctx, db, pool, table, down, inProcess, watermilladapter.SubscriberConfig{})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeOutbox()) }()

	retainCtx, stopRetain := context.WithCancel(ctx)
	retained := make(chan error, 1)
	go func() {
		retained <- store.Retain(retainCtx, outbox.RetentionConfig{Done: retentionDone, Interval: retentionInterval,
			Processed: -1, Logger: warnLogger})
	}()
	defer func() {
		stopRetain()
		err = errors.Join(err, <-retained)
	}()

	flowCtx, stopFlow := context.WithCancel(ctx)
	defer stopFlow()
	var (
		written atomic.Int64
		wg      sync.WaitGroup
		errs    = make([]error, writers)
	)
	// Each writer commits a transaction every tick: together, retentionRate
	// events a second.
	tick := time.Duration(float64(time.Second) * retentionPerTx * writers / retentionRate)
	for w := range writers {
		wg.Go(func() {
			ticker := time.NewTicker(tick)
			defer ticker.Stop()
			for i := w; sleepUntil(flowCtx, ticker.C) == nil; i += writers {
				err := store.InTx(flowCtx, func(ctx context.Context, tx pgx.Tx) error {
					msgs := make([]*message.Message, retentionPerTx)
					for j := range msgs {
						msgs[j] = benchMessage(ctx, i*retentionPerTx+j, eachOwn)
					}
					return pub.WithTx(tx).Publish(outboxTopic, msgs...)
				})
				if err != nil && flowCtx.Err() == nil {
					errs[w] = err
					return
				}
				written.Add(retentionPerTx)
			}
		})
	}
	var vacuumErr error
	wg.Go(func() {
		for sleep(flowCtx, retentionVacuum) == nil {
			if _, err := pool.Exec(flowCtx, "VACUUM "+pgx.Identifier{table.Table}.Sanitize()); err != nil && flowCtx.Err() == nil {
				vacuumErr = fmt.Errorf("vacuum: %w", err)
				return
			}
		}
	})
	stopped := func() error {
		stopFlow()
		wg.Wait()
		return errors.Join(append(errs, vacuumErr)...)
	}

	warmUp := min(3*retentionVacuum, sz.retention)
	if err := sleep(ctx, warmUp); err != nil {
		return errors.Join(err, stopped())
	}
	start, err := readTableSize(ctx, pool, table.Table)
	if err != nil {
		return errors.Join(err, stopped())
	}
	writtenAtStart, deliveredAtStart := written.Load(), delivered.Load()
	largest := start
	began := time.Now()
	for time.Since(began) < sz.retention {
		if err := sleep(ctx, time.Second); err != nil {
			return errors.Join(err, stopped())
		}
		s, err := readTableSize(ctx, pool, table.Table)
		if err != nil {
			return errors.Join(err, stopped())
		}
		if s.bytes > largest.bytes {
			largest = s
		}
	}
	end, err := readTableSize(ctx, pool, table.Table)
	if err != nil {
		return errors.Join(err, stopped())
	}
	elapsed := time.Since(began)
	flowed, relayed := written.Load()-writtenAtStart, delivered.Load()-deliveredAtStart
	if err := stopped(); err != nil {
		return err
	}
	rep.addValue(fmt.Sprintf("7 retention: %s of writes at %s (%d writers, %d events per transaction), relay delivering, Retain every %s purging DONE after %s, VACUUM every %s",
		elapsed.Round(time.Second), rate(retentionRate), writers, retentionPerTx, retentionInterval, retentionDone, retentionVacuum),
		fmt.Sprintf("start %s; largest %s; end %s", start, largest, end),
		fmt.Sprintf("%s events written (%s) and %s delivered during it",
			thousands(flowed), rate(float64(flowed)/elapsed.Seconds()), thousands(relayed)))
	return nil
}

// sleepUntil waits for a tick of c, or until ctx ends.
func sleepUntil(ctx context.Context, c <-chan time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c:
		return nil
	}
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
