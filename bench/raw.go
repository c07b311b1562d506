package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// The raw claims commit as the relay's bookkeeping does, without waiting
// for the WAL flush ({async}), so that the ceilings differ from the relay
// in their SQL only.
const rawAsync = `(SELECT set_config('synchronous_commit', 'off', true)) AS async_commit`

// Both raw claims follow a cursor, as a drain written by hand for speed
// would: each starts after the last row ($3, $4) of the previous claim, so
// that it does not walk again over the index entries earlier claims left
// (PostgreSQL keeps them until a vacuum). Each returns the due time its
// cursor needs.

// sqlRawLeaseClaim leases a batch of 100 due rows, as the relay and a job
// queue's claim do: the lease is written into the rows, and the claim
// commits at once. The lease goes into locked_until, which no index holds,
// so that with the table's fill factor the claim is a heap-only update.
const sqlRawLeaseClaim = `
WITH due AS (
    SELECT event_id FROM {raw}
    WHERE status IN (0, 2) AND topic = $1 AND available_at <= $2
        AND (locked_until IS NULL OR locked_until <= $2)
        AND (available_at, event_id) > ($3::timestamptz, $4::text)
    ORDER BY available_at, event_id
    LIMIT 100
    FOR UPDATE SKIP LOCKED
)
UPDATE {raw} AS o SET locked_by = 'raw', locked_at = $2, locked_until = $2 + interval '5 minutes'
FROM due, {async} WHERE o.event_id = due.event_id
RETURNING o.event_id, o.event_type, o.aggregate_id, o.payload, o.headers, o.attempts, o.available_at`

// sqlRawLockClaim selects a batch of 100 due rows and keeps them locked
// until the transaction that marks them done commits: no lease is
// written, at the price of a transaction open while the batch is handled.
const sqlRawLockClaim = `
SELECT event_id, event_type, aggregate_id, payload, headers, attempts, available_at FROM {raw}
WHERE status IN (0, 2) AND topic = $1 AND available_at <= $2
    AND (available_at, event_id) > ($3::timestamptz, $4::text)
ORDER BY available_at, event_id
LIMIT 100
FOR UPDATE SKIP LOCKED`

const sqlRawMarkDone = `
UPDATE {raw} SET status = 1, done_at = $2, updated_at = $2, locked_by = NULL, locked_at = NULL, locked_until = NULL
FROM {async} WHERE event_id = ANY($1::text[])`

// sqlRawFill writes n due rows in one statement: the fill is not timed.
const sqlRawFill = `
INSERT INTO {raw} (event_id, event_type, topic, aggregate_type, aggregate_id, payload, payload_json, headers,
    status, attempts, occurred_at, available_at, created_at, updated_at)
SELECT lpad(i::text, 26, '0'), $2, $3, $4, 'order-' || i, $5, true, $6, 0, 0, $7, $7, $7, $7
FROM generate_series(1, $1) AS i`

// sqlOwnedSequences lists, as the statements that give them to table $2,
// the sequences owned by the columns of table $1: the one numbering
// events (seq, migration 4), whose nextval a table made LIKE it calls too.
const sqlOwnedSequences = `
SELECT format('ALTER SEQUENCE %s OWNED BY %s.%I', s.oid::regclass, $2::regclass, a.attname)
FROM pg_depend AS d
JOIN pg_class AS s ON s.oid = d.objid AND s.relkind = 'S'
JOIN pg_attribute AS a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
    AND d.refobjid = $1::regclass AND d.deptype = 'a'`

// rawTable creates a table like the outbox table (columns, constraints,
// indexes and storage parameters such as the fill factor, defaults and
// the sequences they draw on), from a migrated one.
func rawTable(ctx context.Context, pool *pgxpool.Pool) (string, func(), error) {
	like, dropLike, err := freshTable(ctx, pool, "bench_like")
	if err != nil {
		return "", nil, err
	}
	defer dropLike()
	name := strings.Replace(like.Table, "bench_like", "bench_raw", 1)
	var params []string // LIKE copies no storage parameter
	err = pool.QueryRow(ctx, "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = to_regclass($1)",
		pgx.Identifier{like.Table}.Sanitize()).Scan(&params)
	if err != nil {
		return "", nil, fmt.Errorf("raw table: read storage parameters: %w", err)
	}
	create := fmt.Sprintf("CREATE TABLE %s (LIKE %s INCLUDING ALL)",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{like.Table}.Sanitize())
	if len(params) > 0 {
		create += " WITH (" + strings.Join(params, ", ") + ")"
	}
	if _, err = pool.Exec(ctx, create); err != nil {
		return "", nil, fmt.Errorf("raw table: %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	}
	// The raw table's defaults call the migrated table's sequences, which
	// would keep that table from being dropped: they pass to the raw
	// table, and go with it.
	rows, err := pool.Query(ctx, sqlOwnedSequences, pgx.Identifier{like.Table}.Sanitize(), pgx.Identifier{name}.Sanitize())
	var adopt []string
	if err == nil {
		adopt, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	for _, stmt := range adopt {
		if err == nil {
			_, err = pool.Exec(ctx, stmt)
		}
	}
	if err != nil {
		drop()
		return "", nil, fmt.Errorf("raw table: take over sequences: %w", err)
	}
	return name, drop, nil
}

func rawSQL(query, table string) string {
	return strings.NewReplacer("{raw}", pgx.Identifier{table}.Sanitize(), "{async}", rawAsync).Replace(query)
}

// rawHeaders is what the outbox stores for a bench message's metadata.
func rawHeaders(i int) []byte {
	h, _ := json.Marshal(map[string]string{
		"outbox_message_uuid": watermill.NewUUID(), keySeq: fmt.Sprint(i),
		"outbox_event_type": eventType, "outbox_aggregate_type": aggregateType, "outbox_aggregate_id": aggregateID(i),
	})
	return h
}

// rawInsert: writers, each inserting one row per transaction: BEGIN,
// INSERT and COMMIT one after the other, or with oneTrip in one round
// trip, a pgx batch that begins the transaction (Batch.BeginTx), inserts
// and commits.
func rawInsert(ctx context.Context, pool *pgxpool.Pool, n, writers int, oneTrip bool) (window, error) {
	table, drop, err := rawTable(ctx, pool)
	if err != nil {
		return window{}, err
	}
	defer drop()
	insert := rawSQL(sqlRawInsert, table)
	args := func(i int) []any {
		return []any{outbox.NewID(), eventType, outboxTopic, aggregateType, aggregateID(i), payload(i), rawHeaders(i), time.Now()}
	}
	watch := startWatch(ctx, pool)
	err = parallel(writers, n, func(i int) error {
		if oneTrip {
			var b pgx.Batch
			b.BeginTx(pgx.TxOptions{})
			b.Queue(insert, args(i)...)
			b.Queue("commit")
			// On a connection of its own: the pool's SendBatch would keep
			// it until the batch's transaction commits through pgx.
			return pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error { return c.SendBatch(ctx, &b).Close() })
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insert, args(i)...)
			return err
		})
	})
	return watch.stop(n), err
}

// rawClaim: one loop claiming 100 rows and marking them done, until the
// table of n due rows is drained; lease chooses the claim: a lease written
// into the rows (sqlRawLeaseClaim, then the marking in a statement of its
// own), or row locks held by the transaction that marks them
// (sqlRawLockClaim).
func rawClaim(ctx context.Context, pool *pgxpool.Pool, n int, lease bool) (window, error) {
	table, drop, err := rawTable(ctx, pool)
	if err != nil {
		return window{}, err
	}
	defer drop()
	if _, err := pool.Exec(ctx, rawSQL(sqlRawFill, table), n, eventType, outboxTopic, aggregateType,
		payload(0), rawHeaders(0), time.Now().Add(-time.Second)); err != nil {
		return window{}, fmt.Errorf("raw fill: %w", err)
	}
	if err := analyze(ctx, pool, table); err != nil {
		return window{}, err
	}
	markDone := rawSQL(sqlRawMarkDone, table)
	var (
		cur   rawCursor
		batch func() (int, error)
	)
	if lease {
		claim := rawSQL(sqlRawLeaseClaim, table)
		batch = func() (int, error) { return rawClaimAndMark(ctx, pool, claim, markDone, &cur) }
	} else {
		claim := rawSQL(sqlRawLockClaim, table)
		batch = func() (claimed int, err error) {
			err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				claimed, err = rawClaimAndMark(ctx, tx, claim, markDone, &cur)
				return err
			})
			return claimed, err
		}
	}
	done := 0
	watch := startWatch(ctx, pool)
	for {
		claimed, err := batch()
		if err != nil {
			return window{}, err
		}
		if claimed == 0 {
			break
		}
		done += claimed
	}
	w := watch.stop(n)
	if done != n {
		return window{}, errors.New("raw claim: " + fmt.Sprint(done, " of ", n, " rows claimed"))
	}
	return w, nil
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// rawCursor is the last row, in due order, a raw claim took.
type rawCursor struct {
	dueAt time.Time
	id    string
}

// rawClaimAndMark runs claim from cur, reads the claimed rows as a relay
// would, moves cur to the last of them in due order and marks them done;
// it returns how many it claimed.
func rawClaimAndMark(ctx context.Context, q querier, claim, markDone string, cur *rawCursor) (int, error) {
	rows, err := q.Query(ctx, claim, outboxTopic, time.Now(), cur.dueAt, cur.id)
	if err != nil {
		return 0, err
	}
	var ids []string
	for rows.Next() {
		var (
			id, typ, agg  string
			body, headers []byte
			attempts      int
			dueAt         time.Time
		)
		if err := rows.Scan(&id, &typ, &agg, &body, &headers, &attempts, &dueAt); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
		if cmp.Or(dueAt.Compare(cur.dueAt), strings.Compare(id, cur.id)) > 0 {
			*cur = rawCursor{dueAt, id}
		}
	}
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, err
	}
	_, err = q.Exec(ctx, markDone, ids, time.Now())
	return len(ids), err
}
