package postgres

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
)

// Every SQL statement of the PostgreSQL store, except the migrations (see
// the migrations folder). {table}, {inbox}, {lease} and {migrations} stand
// for the quoted, schema-qualified names; every value is a bind parameter.

const sqlCreateMigrationTable = `
CREATE TABLE IF NOT EXISTS {migrations} (
    table_name varchar(63) NOT NULL,
    version    integer     NOT NULL,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_name, version)
)`

const sqlMigrationVersion = `SELECT coalesce(max(version), 0) FROM {migrations} WHERE table_name = $1`

const sqlRecordMigration = `INSERT INTO {migrations} (table_name, version, name) VALUES ($1, $2, $3)`

// sqlMigrationTableExists tells whether {migrations} exists, $1 being its
// quoted name: to_regclass is NULL for a missing table, where a query of
// it would fail and abort the transaction it runs in.
const sqlMigrationTableExists = `SELECT to_regclass($1) IS NOT NULL`

const sqlAppliedMigrations = `
SELECT version, name, applied_at FROM {migrations} WHERE table_name = $1 ORDER BY version`

// The records of a migration script (see MigrationScripts), where values
// are literals ({table_name}, {version}, {file}): recording a migration
// twice is a no-op.
const (
	sqlScriptRecordMigration = `
INSERT INTO {migrations} (table_name, version, name) VALUES ({table_name}, {version}, {file})
ON CONFLICT DO NOTHING`
	sqlScriptUnrecordMigration = `DELETE FROM {migrations} WHERE table_name = {table_name} AND version = {version}`
)

// eventColumns is what every read returns, in the order scanEvent expects;
// {o} qualifies the columns where a statement needs it. A JSON payload is
// in payload_doc when that is not NULL (migration 7,
// Config.JSONPayloadColumn), whatever the store's configuration.
const eventColumns = `{o}event_id, {o}event_type, {o}topic, {o}aggregate_type,
    coalesce({o}aggregate_id, ''), coalesce({o}tenant_id, ''), {o}payload, {o}payload_doc, {o}payload_json, {o}headers,
    {o}status, {o}attempts, {o}occurred_at, {o}available_at, {o}created_at, {o}updated_at, {o}done_at,
    coalesce({o}last_error, ''), coalesce({o}locked_by, ''), {o}locked_at, {o}locked_until,
    coalesce({o}error_group, ''), coalesce({o}idempotency_key, ''), {o}seq`

// sqlInsert writes any number of rows in one statement: one array per
// column. $1 is the write time; rows whose claim flag is set are written
// claimed by owner $2 until $15. {payload_columns} and {payload} are where
// the payload goes (see payloadInto).
const sqlInsert = `
INSERT INTO {table} (event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
    {payload_columns}, payload_json, headers, status, attempts,
    occurred_at, available_at, created_at, updated_at, locked_by, locked_at, locked_until)
SELECT u.event_id, u.event_type, u.topic, u.aggregate_type, nullif(u.aggregate_id, ''), nullif(u.tenant_id, ''),
    {payload}, u.payload_json, u.headers::jsonb, 0, 0,
    u.occurred_at, u.available_at, $1, $1,
    CASE WHEN u.claimed THEN $2 END, CASE WHEN u.claimed THEN $1::timestamptz END,
    CASE WHEN u.claimed THEN $15::timestamptz END
FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
    $9::bytea[], $10::boolean[], $11::text[], $12::timestamptz[], $13::timestamptz[], $14::boolean[])
    AS u(event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
         payload, payload_json, headers, occurred_at, available_at, claimed)`

// sqlInsertHot is sqlInsert for a write with hot rows: it returns the
// write's savepoint mark (see sqlSavepoint), the same for every row.
const sqlInsertHot = `WITH inserted AS (` + sqlInsert + `
RETURNING ` + sqlSavepoint + ` AS savepoint)
SELECT max(savepoint) FROM inserted`

// sqlInsertOne is sqlInsert for a single event, with the same parameters
// as scalars: most business transactions write one event, and a VALUES row
// costs the database less than unnesting twelve one-element arrays.
const sqlInsertOne = `
INSERT INTO {table} (event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
    {payload_columns}, payload_json, headers, status, attempts,
    occurred_at, available_at, created_at, updated_at, locked_by, locked_at, locked_until)
VALUES ($3, $4, $5, $6, nullif($7::text, ''), nullif($8::text, ''),
    {payload}, $10, $11::jsonb, 0, 0,
    $12, $13, $1, $1,
    CASE WHEN $14::boolean THEN $2::text END, CASE WHEN $14::boolean THEN $1::timestamptz END,
    CASE WHEN $14::boolean THEN $15::timestamptz END)`

// sqlInsertOneHot is sqlInsertOne returning the savepoint mark.
const sqlInsertOneHot = sqlInsertOne + `
RETURNING ` + sqlSavepoint

// sqlInsertKeyed is sqlInsert for a write with idempotency keys ($16,
// empty for none): a row whose topic and key another row has is skipped,
// after waiting for the transaction that wrote that row if it is still
// open.
// It returns the event id of each row written and the write's savepoint
// mark ({mark}: sqlSavepoint, or 0 when none is asked for).
const sqlInsertKeyed = `
INSERT INTO {table} (event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
    {payload_columns}, payload_json, headers, status, attempts,
    occurred_at, available_at, created_at, updated_at, locked_by, locked_at, locked_until, idempotency_key)
SELECT u.event_id, u.event_type, u.topic, u.aggregate_type, nullif(u.aggregate_id, ''), nullif(u.tenant_id, ''),
    {payload}, u.payload_json, u.headers::jsonb, 0, 0,
    u.occurred_at, u.available_at, $1, $1,
    CASE WHEN u.claimed THEN $2 END, CASE WHEN u.claimed THEN $1::timestamptz END,
    CASE WHEN u.claimed THEN $15::timestamptz END, nullif(u.idempotency_key, '')
FROM unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
    $9::bytea[], $10::boolean[], $11::text[], $12::timestamptz[], $13::timestamptz[], $14::boolean[], $16::text[])
    AS u(event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
         payload, payload_json, headers, occurred_at, available_at, claimed, idempotency_key)
ON CONFLICT (topic, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING event_id, {mark}`

// payloadDocColumns and payloadDoc are the inserts' {payload_columns} and
// {payload} under Config.JSONPayloadColumn, {bytes} being the payload
// and {json} its JSON flag: a JSON payload goes to payload_doc, converted
// to text (which checks that it is UTF-8) and to json (which checks that
// it is JSON and keeps it as written), with an empty payload beside it.
const (
	payloadDocColumns = `payload, payload_doc`
	payloadDoc        = `CASE WHEN {json}::boolean THEN ''::bytea ELSE {bytes}::bytea END,
    CASE WHEN {json}::boolean THEN convert_from({bytes}::bytea, 'UTF8')::json END`
)

// payloadInto renders the payload of an insert statement, whose payload
// parameter is bytes and JSON flag isJSON: into payload, or with docs as
// payloadDoc says.
func payloadInto(sql, bytes, isJSON string, docs bool) string {
	columns, values := "payload", bytes
	if docs {
		columns = payloadDocColumns
		values = strings.NewReplacer("{bytes}", bytes, "{json}", isJSON).Replace(payloadDoc)
	}
	return strings.NewReplacer("{payload_columns}", columns, "{payload}", values).Replace(sql)
}

// sqlKeyHolders returns, for the topics $1 and idempotency keys $2 taken
// by a row, the key's place in the arrays (from 1) and that row's event
// id. A statement of its own, it sees the rows that transactions
// committed while the insert before it waited for them.
const sqlKeyHolders = `
SELECT k.i, o.event_id
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(topic, idempotency_key, i)
JOIN {table} AS o ON o.topic = k.topic AND o.idempotency_key = k.idempotency_key
WHERE o.idempotency_key IS NOT NULL`

// sqlUndoKeyed deletes the rows of the event ids $1 that a write rejected
// for a taken idempotency key had written.
const sqlUndoKeyed = `DELETE FROM {table} WHERE event_id = ANY($1::text[])`

// sqlSavepoint is the savepoint mark of an inserted row: 0 when the
// top-level transaction wrote it, otherwise the full (64-bit) id of the
// subtransaction that did. A row's xmin is the 32-bit id of the
// (sub)transaction that wrote it; pg_current_xact_id is the full id of the
// top-level one, whose epoch a subtransaction shares unless its id wrapped
// around since. Reading xmin needs the SELECT privilege on it: a role that
// writes hot events needs GRANT SELECT (xmin) at least.
const sqlSavepoint = `CASE WHEN xmin = xid(pg_current_xact_id()) THEN 0
    ELSE (pg_current_xact_id()::text::bigint >> 32 << 32) + xmin::text::bigint
        + CASE WHEN xmin::text::bigint < pg_current_xact_id()::text::bigint & 4294967295 THEN 4294967296 ELSE 0 END
    END`

// sqlKept tells whether the subtransaction $1 (a savepoint mark) is still
// part of the running transaction: a savepoint rolled back, or one inside
// it, is aborted. It reads no table, so it takes no lock a serializable
// transaction could conflict on, and it sees only this transaction's own
// writes.
const sqlKept = `SELECT pg_xact_status($1::text::xid8) = 'in progress'`

const sqlGet = `SELECT ` + eventColumns + ` FROM {table} WHERE event_id = $1`

// The due condition of the claims: $1 now, $2 written-before for the NEW
// rows due at once (skip-recent, or what a log feed covers), {topics} the
// topic filter. A claimed row is not due until
// its lease ends (locked_until). Rows claimed before migration 2 have no
// locked_until: their claim moved available_at to the end of the lease.
const sqlDue = `status IN (0, 2) {topics} AND available_at <= $1 AND (created_at <= $2 OR status = 2 OR available_at > created_at)
    AND (locked_until IS NULL OR locked_until <= $1)`

// sqlClaim leases due rows to owner $5 until $3. It writes only columns
// that no index holds (locked_by, locked_at, locked_until), so that with
// the room the table's fill factor leaves on every page (migration 2) the
// update is heap-only: the new row version goes on the same page, no index
// gets an entry, and the log gets the changed bytes only. SKIP LOCKED lets
// concurrent claimers pass each other's rows while the statement runs;
// after it commits, locked_until keeps the rows out of every claim until
// the lease runs out. Claimed rows keep their due index entries, so a claim
// that starts from the earliest due row passes over those in flight;
// {cursor} starts the scan after the last row of the previous claim
// instead (see outboxdriver.Position), which also skips the entries that
// earlier outcomes left until a vacuum.
// Each row comes back with its due time, the claim's order; sorting the
// batch in Go is cheaper than materialising it for an ORDER BY.
// The update finds the locked rows by ctid, a direct fetch, instead of one
// primary key descent per row; the lock keeps the ctid valid until the
// statement ends. A row another transaction changed after this statement's
// snapshot is locked in its newer version, which the snapshot cannot see:
// it is left out of this claim and stays due.
const sqlClaim = `
WITH due AS (
    SELECT ctid FROM {table}
    WHERE ` + sqlDue + ` {cursor}
    ORDER BY available_at, event_id
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE {table} AS o SET locked_by = $5, locked_at = $1, locked_until = $3
FROM due {async} WHERE o.ctid = due.ctid
RETURNING ` + eventColumns

// topicFilter is sqlDue's {topics}: the claim's topic, $6. Plain
// equality, so that the due index serves the order too.
const topicFilter = `AND topic = $6`

// aggregateOrder is the order of the aggregate index (migration 4): by
// topic and aggregate, byte by byte (COLLATE "C", which Go's string
// comparison matches, for the cursor), an event without an aggregate id
// (NULL, or empty from a writer other than this package's, which the store
// reads back as none) being an aggregate of its own, then by seq, the
// order of the inserts.
const aggregateOrder = `topic COLLATE "C", aggregate_type COLLATE "C", nullif(aggregate_id, '') IS NULL,
    coalesce(nullif(aggregate_id, ''), event_id) COLLATE "C"`

// headColumns are what an ordered claim reads of an aggregate's first
// event: where it is, its aggregate, and what decides whether it is due.
const headColumns = `ctid, topic, aggregate_type, nullif(aggregate_id, '') IS NULL AS keyless,
    coalesce(nullif(aggregate_id, ''), event_id) AS key, seq, status, available_at, created_at, locked_until`

// sqlClaimOrdered is sqlClaim for an ordered claim: it leases the first
// event of each aggregate, when that event is due, up to $4 of them. An
// aggregate whose first event is claimed already, waits for a retry or is
// DEAD is passed over, since its first event is not DONE. The aggregates
// are walked in the index's order with one descent each to the next one
// (a recursive query, which the LIMIT stops), from {start}, and, with a
// cursor, after the aggregate of the previous claim's last event: the
// work does not grow with the events waiting behind the first of their
// aggregate, and aggregates take turns. {within} ends the walk at the end
// of the claim's topics. The heads found are then locked by ctid alone,
// skipping those that concurrent claims hold: a row changed since the
// walk's snapshot has a newer version elsewhere, which the ctid does not
// match when the lock rechecks it, so it is skipped and stays as it is.
const sqlClaimOrdered = `
WITH RECURSIVE heads AS (
    (SELECT ` + headColumns + ` FROM {table}
    WHERE status <> 1 {start}
    ORDER BY ` + aggregateOrder + `, seq
    LIMIT 1)
    UNION ALL
    SELECT next.* FROM heads AS h, LATERAL (
        SELECT ` + headColumns + ` FROM {table}
        WHERE status <> 1 AND (` + aggregateOrder + `) > (h.topic, h.aggregate_type, h.keyless, h.key)
        ORDER BY ` + aggregateOrder + `, seq
        LIMIT 1
    ) AS next
    {within}
)` + sqlLeaseHeads

// sqlLeaseHeads leases the due ones of the first events an ordered claim
// found (heads), up to $4, locking them by ctid alone as sqlClaimOrdered
// says.
const sqlLeaseHeads = `, picked AS (
    SELECT ctid FROM heads WHERE ` + sqlDue + `
    LIMIT $4
), ` + sqlLeasePicked

// sqlLeasePicked leases to $5 until $3, at $1, the rows whose ctids the
// statement's CTE picked holds, locking them by ctid alone and skipping
// those that concurrent claims hold: a row changed since the statement's
// snapshot has a newer version elsewhere, which the ctid does not match
// when the lock rechecks it, so it is skipped and stays as it is.
const sqlLeasePicked = `locked AS (
    SELECT ctid FROM {table}
    WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked))
    FOR UPDATE SKIP LOCKED
)
UPDATE {table} AS o SET locked_by = $5, locked_at = $1, locked_until = $3
FROM locked {async} WHERE o.ctid = locked.ctid
RETURNING ` + eventColumns

// sqlLeaseRuns is sqlLeaseHeads for a claim with runs
// (outboxdriver.ClaimParams.RunLength): with each head found due, up to
// {follow} of the events after it in its aggregate, in seq order, as far
// as each is due (the window's bool_and stops the run at the first that is
// not), and {rows} in all, every run's k-th event before any run's
// (k+1)-th. The events picked are locked by ctid as the heads are, and
// each run is cut before its first event the lock skipped, so that a run
// never has a gap: the events after a skipped one stay as they are. Each
// row comes back with its place in its run.
const sqlLeaseRuns = `, claimable AS (
    SELECT h.*, row_number() OVER () AS n FROM (SELECT * FROM heads WHERE ` + sqlDue + ` LIMIT $4) AS h
), followers AS (
    SELECT c.n, f.i, f.ctid FROM claimable AS c, LATERAL (
        SELECT w.ctid, w.i FROM (
            SELECT r.ctid, row_number() OVER (ORDER BY r.seq) AS i,
                bool_and(r.status IN (0, 2) AND r.available_at <= $1 AND (r.created_at <= $2 OR r.status = 2 OR r.available_at > r.created_at)
                    AND (r.locked_until IS NULL OR r.locked_until <= $1)) OVER (ORDER BY r.seq) AS due
            FROM (
                SELECT ctid, seq, status, available_at, created_at, locked_until FROM {table}
                WHERE status <> 1 AND topic COLLATE "C" = c.topic AND aggregate_type COLLATE "C" = c.aggregate_type
                    AND (nullif(aggregate_id, '') IS NULL) = c.keyless
                    AND coalesce(nullif(aggregate_id, ''), event_id) COLLATE "C" = c.key AND seq > c.seq {bound}
                ORDER BY seq
                LIMIT {follow}
            ) AS r
        ) AS w
        WHERE w.due
    ) AS f
    WHERE NOT c.keyless
), picked AS (
    SELECT ctid, n, i FROM (SELECT ctid, n, 0::bigint AS i FROM claimable UNION ALL SELECT ctid, n, i FROM followers) AS r
    ORDER BY i, n
    LIMIT {rows}
), locked AS (
    SELECT ctid FROM {table}
    WHERE ctid = ANY(ARRAY(SELECT ctid FROM picked))
    FOR UPDATE SKIP LOCKED
), kept AS (
    SELECT k.ctid, k.i FROM (
        SELECT p.ctid, p.i, bool_and(l.ctid IS NOT NULL) OVER (PARTITION BY p.n ORDER BY p.i) AS whole
        FROM picked AS p LEFT JOIN locked AS l ON l.ctid = p.ctid
    ) AS k
    WHERE k.whole
)
UPDATE {table} AS o SET locked_by = $5, locked_at = $1, locked_until = $3
FROM kept {async} WHERE o.ctid = kept.ctid
RETURNING ` + eventColumns + `, kept.i`

// sqlEarlierUnfinished finds an event of the aggregate of row a (topic,
// aggregate_type, aggregate_id NULL for none, seq) that is not DONE and
// was inserted before it: one descent of the aggregate index, as
// sqlClaimHeads makes.
const sqlEarlierUnfinished = `
    SELECT 1 FROM {table}
    WHERE status <> 1 AND topic COLLATE "C" = a.topic AND aggregate_type COLLATE "C" = a.aggregate_type
        AND (nullif(aggregate_id, '') IS NULL) = (a.aggregate_id IS NULL)
        AND coalesce(nullif(aggregate_id, ''), event_id) COLLATE "C" = a.aggregate_id AND seq < a.seq`

// sqlUnfinishedBefore reads, for each row named by its aggregate ($2
// types, $3 ids) and seq ($4) within topic $1, whether an event of the
// aggregate inserted before it is not DONE (sqlEarlierUnfinished). It
// returns the rows' places in the arrays, from 1, of those that have one.
const sqlUnfinishedBefore = `
SELECT a.i FROM (
    SELECT $1::text AS topic, u.* FROM unnest($2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS u(aggregate_type, aggregate_id, seq, i)
) AS a
WHERE EXISTS (` + sqlEarlierUnfinished + `
)`

// sqlLeaseFirst leases to $5 until $3, at $1, the events of $2 (of topic
// $4) that are NEW, under no running lease and the first of their
// aggregate not DONE (sqlEarlierUnfinished), locking them as the ordered
// claims do (sqlLeasePicked).
const sqlLeaseFirst = `
WITH picked AS (
    SELECT o.ctid FROM {table} AS o,
        LATERAL (SELECT o.topic, o.aggregate_type, nullif(o.aggregate_id, '') AS aggregate_id, o.seq) AS a
    WHERE o.event_id = ANY($2::text[]) AND o.topic COLLATE "C" = $4 AND o.status = 0 AND ` + sqlNoRunningLease + `
        AND NOT EXISTS (` + sqlEarlierUnfinished + `
        )
), ` + sqlLeasePicked

// sqlClaimHeads is sqlClaimOrdered for the aggregates a claim names
// (outboxdriver.ClaimParams.Aggregates; $6 the topic, $7 aggregate types,
// $8 aggregate ids): the first event of each is one descent of the
// aggregate index, whatever holds back the other aggregates of the topic.
// Named aggregates have an id: the index's keyless column is compared with
// a false the planner cannot fold, since it would turn "= false" into an
// IS NOT NULL that the index does not hold, and scan the table.
const sqlClaimHeads = `
WITH heads AS (
    SELECT h.*, a.max_seq FROM unnest($7::text[], $8::text[], $9::bigint[]) AS a(aggregate_type, aggregate_id, max_seq),
    LATERAL (
        SELECT ` + headColumns + ` FROM {table}
        WHERE status <> 1 AND topic COLLATE "C" = $6 AND aggregate_type COLLATE "C" = a.aggregate_type
            AND (nullif(aggregate_id, '') IS NULL) = (a.aggregate_id IS NULL)
            AND coalesce(nullif(aggregate_id, ''), event_id) COLLATE "C" = a.aggregate_id AND seq <= a.max_seq
        ORDER BY seq
        LIMIT 1
    ) AS h
)` + sqlLeaseHeads

// The walk's bounds in sqlClaimOrdered: where it starts without a cursor
// ({start}), and where it stops ({within}), the claim's topic $6. A topic
// compared alone is not a bound the row comparison can start the index
// scan from, so that each step would walk the topic from its start.
const (
	orderedStart  = `AND topic COLLATE "C" = $6`
	orderedWithin = `WHERE next.topic = $6`
)

// orderedAfter is sqlClaimOrdered's {start} with a cursor: the aggregate
// of the last event claimed, $7 to $10.
const orderedAfter = `AND (` + aggregateOrder + `) > ($7::text, $8::text, $9::boolean, $10::text)`

// cursorAfter is sqlClaim's {cursor} when a cursor is set: due time $7 and
// id $8. A row comparison, so that the due index starts the scan there.
const cursorAfter = `AND (available_at, event_id) > ($7::timestamptz, $8::text)`

// sqlRelease ends owner $2's claims; the rows are due again in their place.
const sqlRelease = `
UPDATE {table} SET locked_by = NULL, locked_at = NULL, locked_until = NULL
FROM (SELECT 1) AS one {async}
WHERE event_id = ANY($1::text[]) AND locked_by = $2 AND status IN (0, 2)`

// sqlReleaseOwned ends owner $2's claims made before $3 on the pending
// events of topic $1.
const sqlReleaseOwned = `
UPDATE {table} SET locked_by = NULL, locked_at = NULL, locked_until = NULL
FROM (SELECT 1) AS one {async}
WHERE topic = $1 AND status IN (0, 2) AND locked_by = $2 AND locked_at < $3`

// sqlUpdateStatus applies a batch of RETRY, DEAD and deferral outcomes
// reported by owner $7; an outcome with an error records its failure
// group ($9) with it: status 0 keeps the current status (a deferral). DONE
// rows are never touched. An outcome needs a pending row that $7 still holds
// or, from no owner, one under no running lease (see
// outboxdriver.Outcome; a claim from before migration 2 has no
// locked_until and runs until available_at), and, where it says how many
// failed attempts the row has before it (attempts_before), that many. The row
// lock an UPDATE takes makes the check see a concurrent claim or outcome once
// it commits.
const sqlUpdateStatus = `
UPDATE {table} AS o SET
    status       = CASE WHEN u.status = 0 THEN o.status ELSE u.status END,
    attempts     = o.attempts + u.spent,
    available_at = coalesce(u.next_at, o.available_at),
    last_error   = coalesce(nullif(u.error, ''), o.last_error),
    error_group  = CASE WHEN u.error = '' THEN o.error_group ELSE nullif(u.error_group, '') END,
    updated_at   = $1,
    locked_by    = NULL,
    locked_at    = NULL,
    locked_until = NULL
FROM unnest($2::text[], $3::smallint[], $4::integer[], $5::timestamptz[], $6::text[], $8::integer[], $9::text[])
    AS u(event_id, status, spent, next_at, error, attempts_before, error_group) {async}
WHERE o.event_id = u.event_id AND o.status IN (0, 2) AND (o.locked_by = $7 OR $7 = '' AND ` + sqlNoRunningLease + `)
    AND (u.attempts_before IS NULL OR o.attempts = u.attempts_before)`

// sqlNoRunningLease says that row o is under no running lease at $1: a
// claim from before migration 2 has no locked_until and runs until
// available_at.
const sqlNoRunningLease = `(o.locked_until <= $1 OR o.locked_until IS NULL AND (o.locked_by IS NULL OR o.available_at <= $1))`

// sqlMarkDone records the DONE outcomes of a batch, by id ($2): a DONE
// applies whoever holds the row, spends no attempt, and leaves the due
// time and the last error as they are. Rows already DONE are left alone.
const sqlMarkDone = `
UPDATE {table} SET status = 1, done_at = $1, updated_at = $1,
    locked_by = NULL, locked_at = NULL, locked_until = NULL
FROM (SELECT 1) AS one {async}
WHERE event_id = ANY($2::text[]) AND status <> 1`

// sqlDeleteDone records DONE outcomes under Config.DeleteDone, by id
// ($1): deleting a row writes neither a row version nor index entries.
// Like sqlMarkDone, it leaves DONE rows alone.
const sqlDeleteDone = `
DELETE FROM {table} USING (SELECT 1) AS one {async}
WHERE event_id = ANY($1::text[]) AND status <> 1`

// asyncCommit, joined into the relay's bookkeeping statements (claims,
// releases, outcomes), lets their transactions commit without waiting for
// the WAL flush. What a database crash can lose of them is a claim (the
// event is due again) or an outcome (the event is delivered again): at
// least once still holds, while every claim and outcome batch stops
// waiting for the disk. Config.SynchronousBookkeeping turns it off.
const asyncCommit = `, (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit`

// sqlBacklog reads a topic's pending rows through the due index.
const sqlBacklog = `SELECT count(*), min(available_at) FROM {table} WHERE status IN (0, 2) AND topic = $1`

// sqlNotify sends one notification per topic ($2) on channel $1, in the
// statement's own transaction. That transaction need not wait for its
// commit to reach the disk: a notification lost in a crash costs a relay
// one poll interval, while waiting would put a WAL flush after every
// business commit.
const sqlNotify = `
SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, topic)
FROM unnest($2::text[]) AS t(topic)`

// sqlDeadFilter selects DEAD rows; each condition is off when its
// parameter is NULL, the empty string or false; an empty id array matches
// no row. $1 ids, $2 event type, $3 topic, $4 died before, $5 aggregate
// type, $6 aggregate id, $7 a LIKE pattern (codec.Contains) the error
// must match ignoring case, $8 error group, $9 ungrouped (error_group
// NULL), $10 died after. status = 3 is the condition of the DEAD indexes
// (migration 5).
const sqlDeadFilter = `status = 3
    AND ($1::text[] IS NULL OR event_id = ANY($1::text[]))
    AND ($2::text = '' OR event_type = $2)
    AND ($3::text = '' OR topic = $3)
    AND ($4::timestamptz IS NULL OR updated_at < $4)
    AND ($5::text = '' OR aggregate_type = $5)
    AND ($6::text = '' OR aggregate_id = $6)
    AND ($7::text = '' OR last_error ILIKE $7 ESCAPE '!')
    AND ($8::text = '' OR error_group = $8)
    AND (NOT $9::boolean OR error_group IS NULL)
    AND ($10::timestamptz IS NULL OR updated_at >= $10)`

// deadFilterParams is the number of sqlDeadFilter's parameters: the
// statements built on it number theirs from deadFilterParams+1.
const deadFilterParams = 10

const sqlQueryDead = `
SELECT ` + eventColumns + ` FROM {table}
WHERE ` + sqlDeadFilter + ` AND event_id > $11
ORDER BY event_id
LIMIT $12`

const sqlCountDead = `SELECT count(*) FROM {table} WHERE ` + sqlDeadFilter

// sqlReplayDead keeps last_error and error_group as the record of why the
// event died. $11 is now.
const sqlReplayDead = `
UPDATE {table} SET status = 0, attempts = 0, available_at = $11, updated_at = $11,
    done_at = NULL, locked_by = NULL, locked_at = NULL, locked_until = NULL
WHERE ` + sqlDeadFilter

// sqlPurgeDead deletes one batch of up to $11 DEAD rows of the filter,
// passing over rows other transactions hold locked.
const sqlPurgeDead = `
DELETE FROM {table} WHERE event_id IN (
    SELECT event_id FROM {table}
    WHERE ` + sqlDeadFilter + `
    LIMIT $11
    FOR UPDATE SKIP LOCKED
)`

// sqlDeadGroups groups the DEAD rows of the filter by error_group, up to
// $11 groups, the largest first, then by group ("" for NULL first). The
// grouping reads the dead group index, which carries the topic, and each
// group's sample, its latest error, is one descent of it: by the group, or
// by NULL for the ungrouped (two subqueries, since an OR of both would
// not descend).
const sqlDeadGroups = `
WITH g AS (
    SELECT error_group, count(*) AS n, min(updated_at) AS first_died, max(updated_at) AS last_died,
        array_agg(DISTINCT topic) AS topics
    FROM {table}
    WHERE ` + sqlDeadFilter + `
    GROUP BY error_group
    ORDER BY n DESC, coalesce(error_group, '') COLLATE "C"
    LIMIT $11
)
SELECT coalesce(g.error_group, ''), g.n, g.first_died, g.last_died, g.topics, coalesce(
    (SELECT last_error FROM {table}
     WHERE ` + sqlDeadFilter + ` AND error_group = g.error_group
     ORDER BY updated_at DESC LIMIT 1),
    (SELECT last_error FROM {table}
     WHERE ` + sqlDeadFilter + ` AND g.error_group IS NULL AND error_group IS NULL
     ORDER BY updated_at DESC LIMIT 1),
    '')
FROM g
ORDER BY g.n DESC, coalesce(g.error_group, '') COLLATE "C"`

// sqlStatsTopics counts the rows by topic and status, with the earliest
// due time of the pending rows due at $1. It reads the whole table.
const sqlStatsTopics = `
SELECT topic, status, count(*), min(available_at) FILTER (WHERE status IN (0, 2) AND available_at <= $1)
FROM {table}
GROUP BY topic, status`

// sqlStatsPending is sqlStatsTopics of the pending rows alone, which the
// due index holds.
const sqlStatsPending = `
SELECT topic, status, count(*), min(available_at) FILTER (WHERE available_at <= $1)
FROM {table}
WHERE status IN (0, 2)
GROUP BY topic, status`

// sqlStatsClaims counts the pending rows whose lease runs at $1, by owner
// and topic, through the due index.
const sqlStatsClaims = `
SELECT locked_by, topic, count(*), min(locked_at), max(locked_until)
FROM {table}
WHERE status IN (0, 2) AND locked_until > $1 AND locked_by IS NOT NULL
GROUP BY locked_by, topic`

// sqlStatsRelays reads the relay heartbeats, their names matching $1
// (outboxdriver.HeartbeatPattern).
const sqlStatsRelays = `SELECT owner, until FROM {lease} WHERE name LIKE $1`

// sqlLogSlots reads the logical replication slots of the current
// database: the log each holds back from its confirmed position to the
// current one (0 before its first confirmation), and the lease-table row
// named $1 (outboxdriver.SlotLeasePrefix) followed by the slot's name,
// where the feed reading it records who confirmed last and when. A
// standby has no current position of its own: there the log replayed so
// far stands for it, rather than fail the whole read.
const sqlLogSlots = `
SELECT s.slot_name, s.active,
    coalesce(pg_wal_lsn_diff(
        CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END,
        s.confirmed_flush_lsn), 0)::bigint,
    coalesce(s.wal_status, ''), coalesce(l.owner, ''), l.until
FROM pg_replication_slots s
LEFT JOIN {lease} l ON l.name = $1::text || s.slot_name
WHERE s.slot_type = 'logical' AND s.database = current_database()`

// sqlQueryPending pages through the pending rows of statuses $1 (a subset
// of NEW and RETRY), of topic $2 unless it is empty, after event id $3, up
// to $4 of them.
const sqlQueryPending = `
SELECT ` + eventColumns + ` FROM {table}
WHERE status IN (0, 2) AND status = ANY($1::smallint[]) AND ($2::text = '' OR topic = $2) AND event_id > $3
ORDER BY event_id
LIMIT $4`

// sqlQueryEvents pages through the rows of every status after event id
// $1, up to $2 of them.
const sqlQueryEvents = `
SELECT ` + eventColumns + ` FROM {table}
WHERE event_id > $1
ORDER BY event_id
LIMIT $2`

// sqlQueryAggregate pages through the rows of aggregate id $1 of type $2,
// of topic $3 unless it is empty, newest first, up to $4 of them; {before}
// is empty or aggregateBefore. It reads the aggregate index backwards
// (its condition spelled out), filtering by topic as it goes.
const sqlQueryAggregate = `
SELECT ` + eventColumns + ` FROM {table}
WHERE aggregate_id = $1 AND aggregate_id IS NOT NULL AND aggregate_type = $2
    AND ($3::text = '' OR topic = $3){before}
ORDER BY created_at DESC, event_id DESC
LIMIT $4`

// aggregateBefore starts the page of sqlQueryAggregate after the row
// created at $5 with event id $6: where the index scan starts.
const aggregateBefore = `
    AND (created_at, event_id) < ($5::timestamptz, $6)`

// sqlAcquireLease takes lease $1 for owner $2 until $4, or renews it: the
// insert takes a lease nobody held; on the conflict, the update applies
// only when $2 holds it already or its holder's lease ended by $3. A row
// comes back when $2 holds the lease. Concurrent takers of a new lease
// queue on its key: the first inserts, the others update under the same
// condition, which then sees the first's lease.
const sqlAcquireLease = `
INSERT INTO {lease} AS l (name, owner, until) VALUES ($1, $2, $4)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until = excluded.until
WHERE l.owner = excluded.owner OR l.until <= $3
RETURNING true`

// sqlHeartbeatRenew moves the until of heartbeat $1 to $3, and
// sqlHeartbeatInsert writes it when the renewal found no row: a relay that
// is new, or whose claims were released as it was presumed dead. Only the
// relay writes its heartbeat, and a reaper deletes it: the insert takes
// the row a concurrent delete left behind as well.
const (
	sqlHeartbeatRenew  = `UPDATE {lease} SET owner = $2, until = $3 WHERE name = $1`
	sqlHeartbeatInsert = `
INSERT INTO {lease} (name, owner, until) VALUES ($1, $2, $3)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until = excluded.until`
)

// sqlExpiredHeartbeats lists up to $3 relay heartbeats (names like $1)
// expired before $2, the longest expired first.
const sqlExpiredHeartbeats = `
SELECT name, owner FROM {lease} WHERE name LIKE $1 AND until < $2 ORDER BY until LIMIT $3`

// sqlReleaseDeadRelay deletes heartbeat $1 if it is still expired before
// $2 and, only then, ends its owner's claims on the pending rows, which are
// due again in their place; one row per topic released (none when the
// delete lost to a renewal or to another reaper), or one with a NULL topic
// when the relay held no claim. A concurrent reaper's delete waits for
// this one and then finds no row.
const sqlReleaseDeadRelay = `
WITH dead AS (
    DELETE FROM {lease} WHERE name = $1 AND until < $2 RETURNING owner
), released AS (
    UPDATE {table} AS o SET locked_by = NULL, locked_at = NULL, locked_until = NULL
    FROM dead
    WHERE o.locked_by = dead.owner AND o.status IN (0, 2)
    RETURNING o.topic
)
SELECT dead.owner, released.topic, count(released.topic)
FROM dead LEFT JOIN released ON true
GROUP BY dead.owner, released.topic`

// sqlEndHeartbeat deletes heartbeat $1 of owner $2.
const sqlEndHeartbeat = `DELETE FROM {lease} WHERE name = $1 AND owner = $2`

// sqlSlotProgress records that reader $2 reads the slot of lease $1 (see
// outboxdriver.SlotLeasePrefix) and last moved its confirmed position at
// $3, and returns the server's WAL flush position and time: a log feed
// whose stream reaches that position has every transaction committed
// before that time.
const sqlSlotProgress = `
WITH progress AS (
    INSERT INTO {lease} (name, owner, until) VALUES ($1, $2, $3)
    ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until = excluded.until
)
SELECT pg_current_wal_flush_lsn()::text, now()`

// The statements a log feed runs on its replication connection, which
// takes only the simple protocol: no parameters, so the names are
// literals ({table_literal}, {publication_literal}, {slot_literal}) and
// quoted identifiers (the %s of sqlCreatePublicationFormat), all of
// validated names.
const (
	// sqlLogState reads in one round trip what a feed checks before it
	// streams: wal_level; the outbox table's schema and name (NULL when it
	// does not exist); whether the publication publishes inserts and the
	// table (NULL when it does not exist); the slot's plugin, type,
	// whether it is of this database, wal_status and confirmed position
	// (NULL when it does not exist).
	sqlLogState = `
WITH tbl AS (
    SELECT n.nspname, c.relname
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = to_regclass({table_literal})
)
SELECT current_setting('wal_level'), tbl.nspname, tbl.relname,
    p.pubinsert,
    EXISTS (SELECT 1 FROM pg_publication_tables t
            WHERE t.pubname = p.pubname AND t.schemaname = tbl.nspname AND t.tablename = tbl.relname),
    s.plugin, s.slot_type, s.database = current_database(), s.wal_status, s.confirmed_flush_lsn
FROM (VALUES (1)) AS one (x)
LEFT JOIN tbl ON true
LEFT JOIN pg_publication p ON p.pubname = {publication_literal}
LEFT JOIN pg_replication_slots s ON s.slot_name = {slot_literal}`

	// sqlCreatePublicationFormat publishes the inserts of the outbox
	// table (the second %s, as the server names it), and nothing else:
	// the feed reads inserts alone.
	sqlCreatePublicationFormat = `CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')`

	// sqlDropSlot drops the slot, which no reader may hold.
	sqlDropSlot = `SELECT pg_drop_replication_slot({slot_literal})`
)

// sqlPurge deletes one batch; the literal status list lets the planner use
// the partial index whatever the parameter.
const sqlPurge = `
DELETE FROM {table} WHERE event_id IN (
    SELECT event_id FROM {table}
    WHERE status IN (1, 3) AND status = ANY($1::smallint[]) AND updated_at < $2
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)`

// sqlMarkProcessed records that consumer $1 processed event $2, in the
// consumer's transaction: no row when a committed transaction recorded it
// already. While another transaction that recorded it is open, the insert
// waits for it, and then records the event only if that one rolled back.
const sqlMarkProcessed = `
INSERT INTO {inbox} (consumer, event_id, processed_at) VALUES ($1, $2, $3)
ON CONFLICT DO NOTHING`

// sqlPurgeProcessed deletes one batch of inbox records older than $1.
const sqlPurgeProcessed = `
DELETE FROM {inbox} WHERE (consumer, event_id) IN (
    SELECT consumer, event_id FROM {inbox}
    WHERE processed_at < $1
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)`

// statements holds the SQL rendered for one table.
type statements struct {
	createMigrationTable, migrationVersion, recordMigration string
	migrationTable, appliedMigrations                       string // the quoted name; the records
	script                                                  migrationfiles.Recorder

	insert, insertOne, get                 string
	insertHot, insertOneHot                string
	insertKeyed, insertKeyedHot            string
	keyHolders, undoKeyed                  string
	release, releaseOwned                  string
	updateStatus                           string
	markDone, deleteDone                   string // deleteDone empty unless Config.DeleteDone
	claim, claimAfter                      string
	claimOrdered, claimOrderedAfter        string
	claimHeads, unfinishedBefore           string
	leaseFirst                             string
	claimRuns, claimRunsAfter, claimRunsOf string // claimOrdered, claimOrderedAfter, claimHeads with runs
	queryDead, countDead, replayDead       string
	purgeDead, deadGroups                  string
	statsTopics, statsPending, statsClaims string
	statsRelays, logSlots                  string
	queryPending, acquireLease             string
	heartbeatRenew, heartbeatInsert        string
	expiredHeartbeats, releaseDeadRelay    string
	endHeartbeat, slotProgress             string
	queryEvents                            string
	queryAggregate, queryAggregateBefore   string
	backlog                                string
	purge                                  string
	markProcessed, purgeProcessed          string
}

// renderStatements renders the statements for the table qualified, its
// inbox and lease tables, as cfg asks.
func renderStatements(qualified, inbox, lease string, cfg Config) statements {
	migrations := pgx.Identifier{ident.MigrationTable}
	if cfg.Schema != "" {
		migrations = pgx.Identifier{cfg.Schema, ident.MigrationTable}
	}
	async := asyncCommit
	if cfg.SynchronousBookkeeping {
		async = ""
	}
	r := strings.NewReplacer("{table}", qualified, "{inbox}", inbox, "{lease}", lease, "{migrations}", migrations.Sanitize(), "{o}", "", "{async}", async)
	// The inserts of many rows take the payloads from unnest, the insert
	// of one row from $9 and $10.
	many := func(sql string) string {
		return r.Replace(payloadInto(sql, "u.payload", "u.payload_json", cfg.JSONPayloadColumn))
	}
	one := func(sql string) string { return r.Replace(payloadInto(sql, "$9", "$10", cfg.JSONPayloadColumn)) }
	s := statements{
		createMigrationTable: r.Replace(sqlCreateMigrationTable),
		migrationVersion:     r.Replace(sqlMigrationVersion),
		recordMigration:      r.Replace(sqlRecordMigration),
		migrationTable:       migrations.Sanitize(),
		appliedMigrations:    r.Replace(sqlAppliedMigrations),
		insert:               many(sqlInsert),
		insertHot:            many(sqlInsertHot),
		insertOneHot:         one(sqlInsertOneHot),
		insertOne:            one(sqlInsertOne),
		insertKeyed:          many(strings.Replace(sqlInsertKeyed, "{mark}", "0", 1)),
		insertKeyedHot:       many(strings.Replace(sqlInsertKeyed, "{mark}", sqlSavepoint, 1)),
		keyHolders:           r.Replace(sqlKeyHolders),
		undoKeyed:            r.Replace(sqlUndoKeyed),
		get:                  r.Replace(sqlGet),
		release:              r.Replace(sqlRelease),
		releaseOwned:         r.Replace(sqlReleaseOwned),
		updateStatus:         r.Replace(sqlUpdateStatus),
		markDone:             r.Replace(sqlMarkDone),
		queryDead:            r.Replace(sqlQueryDead),
		countDead:            r.Replace(sqlCountDead),
		replayDead:           r.Replace(sqlReplayDead),
		purgeDead:            r.Replace(sqlPurgeDead),
		deadGroups:           r.Replace(sqlDeadGroups),
		statsTopics:          r.Replace(sqlStatsTopics),
		statsPending:         r.Replace(sqlStatsPending),
		statsClaims:          r.Replace(sqlStatsClaims),
		statsRelays:          r.Replace(sqlStatsRelays),
		logSlots:             r.Replace(sqlLogSlots),
		queryPending:         r.Replace(sqlQueryPending),
		queryEvents:          r.Replace(sqlQueryEvents),
		queryAggregate:       r.Replace(strings.Replace(sqlQueryAggregate, "{before}", "", 1)),
		queryAggregateBefore: r.Replace(strings.Replace(sqlQueryAggregate, "{before}", aggregateBefore, 1)),
		acquireLease:         r.Replace(sqlAcquireLease),
		heartbeatRenew:       r.Replace(sqlHeartbeatRenew),
		heartbeatInsert:      r.Replace(sqlHeartbeatInsert),
		expiredHeartbeats:    r.Replace(sqlExpiredHeartbeats),
		releaseDeadRelay:     r.Replace(sqlReleaseDeadRelay),
		endHeartbeat:         r.Replace(sqlEndHeartbeat),
		slotProgress:         r.Replace(sqlSlotProgress),
		purge:                r.Replace(sqlPurge),
		backlog:              r.Replace(sqlBacklog),
		markProcessed:        r.Replace(sqlMarkProcessed),
		purgeProcessed:       r.Replace(sqlPurgeProcessed),
	}
	s.script = migrationfiles.Recorder{
		CreateTable: r.Replace(sqlCreateMigrationTable),
		Record:      r.Replace(sqlScriptRecordMigration),
		Unrecord:    r.Replace(sqlScriptUnrecordMigration),
	}
	if cfg.DeleteDone {
		s.deleteDone = r.Replace(sqlDeleteDone)
	}
	claim := strings.ReplaceAll(strings.Replace(sqlClaim, "{topics}", topicFilter, 1), "{o}", "o.")
	s.claim = r.Replace(strings.Replace(claim, "{cursor}", "", 1))
	s.claimAfter = r.Replace(strings.Replace(claim, "{cursor}", cursorAfter, 1))
	ordered := strings.ReplaceAll(strings.ReplaceAll(sqlClaimOrdered, "{topics}", topicFilter), "{o}", "o.")
	ordered = strings.Replace(ordered, "{within}", orderedWithin, 1)
	s.claimOrdered = r.Replace(strings.Replace(ordered, "{start}", orderedStart, 1))
	s.claimOrderedAfter = r.Replace(strings.Replace(ordered, "{start}", orderedAfter, 1))
	s.claimHeads = r.Replace(strings.ReplaceAll(sqlClaimHeads, "{topics}", ""))
	s.unfinishedBefore = r.Replace(sqlUnfinishedBefore)
	s.leaseFirst = r.Replace(sqlLeaseFirst)
	runs := strings.ReplaceAll(strings.ReplaceAll(sqlClaimOrdered, sqlLeaseHeads, sqlLeaseRuns), "{topics}", topicFilter)
	runs = strings.Replace(strings.ReplaceAll(runs, "{o}", "o."), "{within}", orderedWithin, 1)
	runs = strings.Replace(runs, "{bound}", "", 1)
	s.claimRuns = r.Replace(runParams(strings.Replace(runs, "{start}", orderedStart, 1), 7))
	s.claimRunsAfter = r.Replace(runParams(strings.Replace(runs, "{start}", orderedAfter, 1), 11))
	runsOf := strings.ReplaceAll(strings.Replace(sqlClaimHeads, sqlLeaseHeads, sqlLeaseRuns, 1), "{topics}", "")
	s.claimRunsOf = r.Replace(runParams(strings.Replace(runsOf, "{bound}", "AND seq <= c.max_seq", 1), 10))
	return s
}

// runParams numbers sqlLeaseRuns' parameters after the claim's others,
// from first: the followers per head, then the rows in all.
func runParams(sql string, first int) string {
	return strings.NewReplacer("{follow}", "$"+strconv.Itoa(first), "{rows}", "$"+strconv.Itoa(first+1)).Replace(sql)
}
