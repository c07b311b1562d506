package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// The raw limits: what hand-written SQL does on a table of the very shape
// and indexes of the outbox table, with no library in between. They are
// the ceilings the outbox's write path and drain are measured against.

const sqlRawInsert = `
INSERT INTO {raw} (event_id, event_type, topic, aggregate_type, aggregate_id, payload, payload_json, headers,
    status, attempts, occurred_at, available_at, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $6, true, $7, 0, 0, $8, $8, $8, $8)`

// sqlRawClaim leases a batch of 100 due rows, as a job queue's claim does.
const sqlRawClaim = `
WITH due AS (
    SELECT event_id FROM {raw}
    WHERE status IN (0, 2) AND topic = $1 AND available_at <= $2
    ORDER BY available_at, event_id
    LIMIT 100
    FOR UPDATE SKIP LOCKED
)
UPDATE {raw} AS o SET locked_by = 'raw', locked_at = $2, available_at = $2 + interval '5 minutes'
FROM due WHERE o.event_id = due.event_id
RETURNING o.event_id, o.event_type, o.aggregate_id, o.payload, o.headers, o.attempts`

const sqlRawMarkDone = `
UPDATE {raw} SET status = 1, done_at = $2, updated_at = $2, locked_by = NULL, locked_at = NULL
WHERE event_id = ANY($1::text[])`

// sqlRawFill writes n due rows in one statement: the fill is not timed.
const sqlRawFill = `
INSERT INTO {raw} (event_id, event_type, topic, aggregate_type, aggregate_id, payload, payload_json, headers,
    status, attempts, occurred_at, available_at, created_at, updated_at)
SELECT lpad(i::text, 26, '0'), $2, $3, $4, 'order-' || i, $5, true, $6, 0, 0, $7, $7, $7, $7
FROM generate_series(1, $1) AS i`

// rawTable creates a table like the outbox table (columns, constraints
// and indexes), from a migrated one.
func rawTable(ctx context.Context, pool *pgxpool.Pool) (string, func(), error) {
	like, dropLike, err := freshTable(ctx, pool, "bench_like")
	if err != nil {
		return "", nil, err
	}
	defer dropLike()
	name := strings.Replace(like.Table, "bench_like", "bench_raw", 1)
	_, err = pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL)",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{like.Table}.Sanitize()))
	if err != nil {
		return "", nil, fmt.Errorf("raw table: %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	}
	return name, drop, nil
}

func rawSQL(query, table string) string {
	return strings.ReplaceAll(query, "{raw}", pgx.Identifier{table}.Sanitize())
}

// rawHeaders is what the outbox stores for a bench message's metadata.
func rawHeaders(i int) []byte {
	h, _ := json.Marshal(map[string]string{
		"outbox_message_uuid": watermill.NewUUID(), keySeq: fmt.Sprint(i),
		"outbox_event_type": eventType, "outbox_aggregate_type": aggregateType, "outbox_aggregate_id": aggregateID(i),
	})
	return h
}

// rawInsert: writers, each inserting one row per transaction.
func rawInsert(ctx context.Context, pool *pgxpool.Pool, n, writers int) (int, time.Duration, error) {
	table, drop, err := rawTable(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	defer drop()
	insert := rawSQL(sqlRawInsert, table)
	start := time.Now()
	err = parallel(writers, n, func(i int) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insert, outbox.NewID(), eventType, outboxTopic, aggregateType, aggregateID(i),
				payload(i), rawHeaders(i), time.Now())
			return err
		})
	})
	return n, time.Since(start), err
}

// rawClaim: one loop claiming 100 rows and marking them done, until the
// table of n due rows is drained.
func rawClaim(ctx context.Context, pool *pgxpool.Pool, n int) (int, time.Duration, error) {
	table, drop, err := rawTable(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	defer drop()
	if _, err := pool.Exec(ctx, rawSQL(sqlRawFill, table), n, eventType, outboxTopic, aggregateType,
		payload(0), rawHeaders(0), time.Now().Add(-time.Second)); err != nil {
		return 0, 0, fmt.Errorf("raw fill: %w", err)
	}
	if err := analyze(ctx, pool, table); err != nil {
		return 0, 0, err
	}
	claim, markDone := rawSQL(sqlRawClaim, table), rawSQL(sqlRawMarkDone, table)
	done := 0
	start := time.Now()
	for {
		rows, err := pool.Query(ctx, claim, outboxTopic, time.Now())
		if err != nil {
			return 0, 0, err
		}
		var ids []string
		for rows.Next() {
			var (
				id, typ, agg  string
				body, headers []byte
				attempts      int
			)
			if err := rows.Scan(&id, &typ, &agg, &body, &headers, &attempts); err != nil {
				rows.Close()
				return 0, 0, err
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			return 0, 0, err
		}
		if len(ids) == 0 {
			break
		}
		if _, err := pool.Exec(ctx, markDone, ids, time.Now()); err != nil {
			return 0, 0, err
		}
		done += len(ids)
	}
	elapsed := time.Since(start)
	if done != n {
		return 0, 0, errors.New("raw claim: " + fmt.Sprint(done, " of ", n, " rows claimed"))
	}
	return n, elapsed, nil
}
