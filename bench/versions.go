package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// rowVersions are the row versions a table's events cost, per event, as
// pg_stat_user_tables counts them: inserted, updated (hot of them
// heap-only, with no new index entry) and deleted. Each is a tuple
// PostgreSQL writes and a vacuum later reclaims.
type rowVersions struct{ inserted, updated, hot, deleted float64 }

func (v rowVersions) total() float64 { return v.inserted + v.updated + v.deleted }

const sqlTableVersions = `SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
	FROM pg_stat_user_tables WHERE relid = to_regclass($1)`

// statsTimeout bounds the wait for a table's statistics to come in.
const statsTimeout = 15 * time.Second

// tableVersions returns the row versions per event of table, which n
// events went through, read on pool. PostgreSQL 15 keeps a session's
// counts until the session is idle and its last report a second old, so
// every idle connection of pool and of others (the relays' pools) is asked
// to report them at once (pg_stat_force_next_flush), and the counts are
// read until two reads agree and they hold the n inserts. nil when the
// server has no pg_stat_force_next_flush (before PostgreSQL 15).
func tableVersions(ctx context.Context, pool *pgxpool.Pool, table string, n int, others ...*pgxpool.Pool) (*rowVersions, error) {
	pools := append([]*pgxpool.Pool{pool}, others...)
	deadline := time.Now().Add(statsTimeout)
	var last [4]int64
	for read := 0; ; read++ {
		if err := flushStats(ctx, pools); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42883" { // undefined_function
				return nil, nil
			}
			return nil, fmt.Errorf("row versions: %w", err)
		}
		var c [4]int64
		if err := pool.QueryRow(ctx, sqlTableVersions, pgx.Identifier{table}.Sanitize()).Scan(&c[0], &c[1], &c[2], &c[3]); err != nil {
			return nil, fmt.Errorf("row versions: %w", err)
		}
		if read > 0 && c == last && c[0] >= int64(n) {
			per := float64(max(n, 1))
			return &rowVersions{inserted: float64(c[0]) / per, updated: float64(c[1]) / per,
				hot: float64(c[2]) / per, deleted: float64(c[3]) / per}, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("row versions: the statistics of %s did not settle within %s (%d inserts of %d)", table, statsTimeout, c[0], n)
		}
		last = c
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// flushStats has every idle connection of pools report its statistics.
func flushStats(ctx context.Context, pools []*pgxpool.Pool) error {
	for _, p := range pools {
		conns := p.AcquireAllIdle(ctx)
		var err error
		for _, c := range conns {
			if err == nil {
				_, err = c.Exec(ctx, "SELECT pg_stat_force_next_flush()")
			}
			c.Release()
		}
		if err != nil {
			return err
		}
	}
	return nil
}
