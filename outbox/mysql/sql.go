package mysql

import (
	"strconv"
	"strings"

	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// Every SQL statement of the MySQL store, except the migrations (see the
// migrations folder). {table}, {inbox}, {lease} and {migrations} stand
// for the quoted names; every value is a bind parameter, in the order of the ?s.
// Times are BIGINT unix microseconds; lists travel as one JSON array read
// with JSON_TABLE, event ids in it as hex (see sqlcodec.HexIDs), so that
// every statement has one text whatever the size of its batch.

const sqlCreateMigrationTable = `
CREATE TABLE IF NOT EXISTS {migrations} (
    table_name varchar(64)  NOT NULL,
    version    int          NOT NULL,
    name       varchar(255) NOT NULL,
    applied_at bigint       NOT NULL,
    PRIMARY KEY (table_name, version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin`

const sqlMigrationVersion = `SELECT coalesce(max(version), 0) FROM {migrations} WHERE table_name = ?`

const sqlRecordMigration = `INSERT INTO {migrations} (table_name, version, name, applied_at) VALUES (?, ?, ?, ?)`

// sqlMigrationTableExists tells whether the database holds the migration
// table, ? being its name.
const sqlMigrationTableExists = `
SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`

const sqlAppliedMigrations = `
SELECT version, name, applied_at FROM {migrations} WHERE table_name = ? ORDER BY version`

// The records of a migration script (see MigrationScripts), where values
// are literals ({table_name}, {version}, {file}) and the time is the
// server's, in unix microseconds: recording a migration twice is a no-op.
const (
	sqlScriptRecordMigration = `
INSERT INTO {migrations} (table_name, version, name, applied_at)
VALUES ({table_name}, {version}, {file}, CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED))
ON DUPLICATE KEY UPDATE version = version`
	sqlScriptUnrecordMigration = `DELETE FROM {migrations} WHERE table_name = {table_name} AND version = {version}`
)

// sqlRollbackOnTimeout tells whether a lock wait timeout rolls back the
// whole transaction, not only the statement.
const sqlRollbackOnTimeout = `SELECT @@innodb_rollback_on_timeout`

// Migrators take turns on a named lock of the server, held by their
// connection: MySQL commits every DDL statement on its own, so a
// transaction cannot keep two of them from applying one migration each.
const (
	sqlLock   = `SELECT GET_LOCK(?, ?)`
	sqlUnlock = `SELECT RELEASE_LOCK(?)`
)

// eventColumns is what every read returns, in the order sqlcodec.QueryRows
// expects.
const eventColumns = `event_id, event_type, topic, aggregate_type,
    coalesce(aggregate_id, ''), coalesce(tenant_id, ''), payload, payload_json, headers,
    status, attempts, occurred_at, available_at, created_at, updated_at, done_at,
    coalesce(last_error, ''), coalesce(locked_by, ''), locked_at, locked_until, coalesce(error_group, ''),
    coalesce(idempotency_key, '')`

// sqlInsert writes the rows of a batch: {rows} is insertValues once for each.
// The parameters of a row are its event's id, type, topic, aggregate type,
// aggregate id and tenant id (NULL for none), payload, payload_json,
// headers, occurred_at and available_at, the write time twice (created_at,
// updated_at), and the claim of a pre-claimed row (owner, time, end of the
// lease), NULL otherwise, and its idempotency key, NULL for none.
//
// No statement of this file compares a parameter with ”: MySQL's text
// comparisons pad with spaces, so that ' ' = ”. An absent value is NULL.
const sqlInsert = `
INSERT INTO {table} (event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
    payload, payload_json, headers, status, attempts,
    occurred_at, available_at, created_at, updated_at, locked_by, locked_at, locked_until, idempotency_key)
VALUES {rows}`

const insertValues = `(?, ?, ?, ?, ?, ?, ?, ?, ?, 0, 0, ?, ?, ?, ?, ?, ?, ?, ?)`

// insertValuesParams is the number of parameters of insertValues.
const insertValuesParams = 17

// sqlKeyHolders returns the rows holding the topics and idempotency keys
// of a JSON array of [place, topic, key] arrays, topic and key in hex:
// each one's place and event id. It is a locking read, which reads the
// latest committed rows, not the transaction's snapshot: the insert that
// failed on a taken key waited for the transaction that took it to
// commit. The join order and the index are forced, as in sqlRowsOfIDs, so
// that it locks only the rows it returns.
const sqlKeyHolders = `
SELECT k.i, o.event_id
FROM JSON_TABLE(?, '$[*]' COLUMNS (i int PATH '$[0]', topic varchar(2040) PATH '$[1]', k varchar(2040) PATH '$[2]')) AS k
STRAIGHT_JOIN {table} AS o FORCE INDEX ({idem_idx})
    ON o.topic = unhex(k.topic) AND o.idempotency_key = unhex(k.k)
LOCK IN SHARE MODE`

// sqlIDs is a table of the event ids of a JSON array of hex ids (see
// sqlcodec.HexIDs).
const sqlIDs = `JSON_TABLE(?, '$[*]' COLUMNS (id varchar(512) PATH '$')) AS ids`

// sqlRowsOfIDs joins the rows of a JSON array of ids (sqlIDs) as o, one
// lookup of the event id index each. The join order and the index are
// forced: on a small table MySQL would rather read every row and match it
// against the list, and an UPDATE or DELETE that reads a row locks it,
// waiting for any other transaction that holds it, a claim's among them.
const sqlRowsOfIDs = sqlIDs + ` STRAIGHT_JOIN {table} AS o FORCE INDEX ({id_idx}) ON o.event_id = unhex(ids.id)`

// sqlUndoInsert deletes the rows of a JSON array of ids that an insert
// wrote before one of its statements failed.
const sqlUndoInsert = `DELETE o FROM ` + sqlRowsOfIDs

// sqlExisting returns those of the event ids of a JSON array that have a
// row; sqlExistingOne does for one id, what most business transactions
// write, without the JSON.
const (
	sqlExisting    = `SELECT o.event_id FROM ` + sqlRowsOfIDs
	sqlExistingOne = `SELECT event_id FROM {table} WHERE event_id = ?`
)

const sqlGet = `SELECT ` + eventColumns + ` FROM {table} WHERE event_id = ?`

// sqlClaim locks up to LIMIT due rows of one topic, in due order, for the
// claim's transaction, which leases them (sqlLease) and commits.
// Parameters: the topic, now, written-before (skip-recent), now, then
// {cursor}'s, then the limit. A claimed row is not due until its lease
// ends (locked_until). pending leads the due index: the rows of a topic
// that wait, in due order. SKIP LOCKED lets concurrent claimers pass
// each other's rows; after the commit, locked_until keeps them out of
// every claim until the lease runs out. The transaction is READ COMMITTED, so that the scan locks no gap of
// the due index, which would hold back the inserts of writers, and
// releases at once the rows it reads and does not take (those in flight).
// The due index gives one topic's rows in due order, so that the scan
// stops at LIMIT and locks no row it does not take.
//
// {cursor} starts the scan after the last row of the previous claim (see
// outboxdriver.Position): the due index keeps the entries of the rows in
// flight, and of rows whose outcome was recorded until InnoDB purges them.
// {ordered} passes over the events that must wait for an earlier one of
// their aggregate (see orderedHead). Each row comes with its seq, by which
// sqlLease finds it.
const sqlClaim = `
SELECT ` + eventColumns + `, seq FROM {table} AS t
WHERE pending = 1 AND topic = ? AND available_at <= ? AND (created_at <= ? OR status = 2 OR available_at > created_at)
    AND (locked_until IS NULL OR locked_until <= ?) {cursor} {ordered}
ORDER BY available_at, event_id
LIMIT ?
FOR UPDATE SKIP LOCKED`

// cursorAfter is sqlClaim's {cursor} with a cursor: after its due time
// and id (parameters: due time twice, id), spelled so that the due index
// starts the scan there; MariaDB scans from the start of the topic for the
// row comparison (available_at, event_id) > (?, ?).
const cursorAfter = `AND (available_at > ? OR available_at = ? AND event_id > ?)`

// orderedHead is sqlClaim's {ordered} for an ordered claim: a row is
// claimed only if no earlier row of its topic and aggregate is pending or
// DEAD; a row without an aggregate id (NULL, or empty from a writer other
// than this package's, which the store reads back as none) always is.
// Earlier is by seq, the order of the inserts. {first} is firstOfAggregate
// for each status that holds an aggregate back (NEW, RETRY, DEAD): one
// probe each, reading one entry of the aggregate index, since the index
// holds seq, the primary key, after its columns and the first entry is the
// earliest. A probe never reads the aggregate's DONE history nor the
// events waiting behind the first; a single probe for the three statuses
// would read them all.
const orderedHead = `AND coalesce({first}, t.seq) >= t.seq`

// firstOfAggregate is the seq of the first event of t's aggregate with
// status {status}, NULL if none.
const firstOfAggregate = `(SELECT p.seq FROM {table} AS p
        WHERE p.topic = t.topic AND p.aggregate_type = t.aggregate_type AND p.aggregate_id = t.aggregate_id
            AND p.aggregate_id <> '' AND p.status = {status}
        ORDER BY p.seq LIMIT 1)`

// orderedHeads renders orderedHead for every status that holds an
// aggregate back.
func orderedHeads() string {
	heads := make([]string, 0, 3)
	for _, status := range []outbox.Status{outbox.StatusNew, outbox.StatusRetry, outbox.StatusDead} {
		first := strings.Replace(firstOfAggregate, "{status}", strconv.Itoa(int(status)), 1)
		heads = append(heads, strings.Replace(orderedHead, "{first}", first, 1))
	}
	return strings.Join(heads, "\n    ")
}

// sqlLease records owner's claim on the rows a claim locked, found by
// primary key: parameters seqs (JSON), owner, claim time, end of the
// lease. By the event id index instead, the claim would queue behind an
// outcome statement that holds the index entry and waits for the row the
// claim holds: a deadlock.
const sqlLease = `
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (seq bigint PATH '$')) AS claimed
    STRAIGHT_JOIN {table} AS o FORCE INDEX (PRIMARY) ON o.seq = claimed.seq
SET o.locked_by = ?, o.locked_at = ?, o.locked_until = ?`

// sqlRunsAfter reads, for a claim with runs (see
// outboxdriver.ClaimParams.RunLength), the events not DONE that follow
// the heads it locked: parameters the heads as a JSON array of [seq,
// aggregate type, aggregate id], the topic, and how many to read after
// each; it returns the head's place in the array (from 1) and the seq of
// each, in insert order. A plain read, on the aggregate index: it reads
// every event not DONE after the head, as ordered claims read the events
// waiting behind the first of their aggregate. sqlLockRun then locks
// them.
const sqlRunsAfter = `
SELECT w.n, w.seq FROM (
    SELECT h.n, f.seq, row_number() OVER (PARTITION BY h.n ORDER BY f.seq) AS i
    FROM JSON_TABLE(?, '$[*]' COLUMNS (n FOR ORDINALITY, seq bigint PATH '$[0]',
            aggregate_type varchar(256) PATH '$[1]', aggregate_id varchar(512) PATH '$[2]')) AS h
        STRAIGHT_JOIN {table} AS f ON f.topic = ? AND f.aggregate_type = h.aggregate_type
            AND f.aggregate_id = h.aggregate_id AND f.status <> 1 AND f.seq > h.seq
) AS w
WHERE w.i <= ?
ORDER BY w.n, w.i`

// sqlLockRun locks the events sqlRunsAfter read, by seq (JSON), skipping
// those another transaction holds, and reads them as they stand then.
const sqlLockRun = `
SELECT ` + eventColumns + `, o.seq FROM JSON_TABLE(?, '$[*]' COLUMNS (seq bigint PATH '$')) AS claimed
    STRAIGHT_JOIN {table} AS o FORCE INDEX (PRIMARY) ON o.seq = claimed.seq
FOR UPDATE SKIP LOCKED`

// sqlRelease ends an owner's claims: parameters ids (JSON), owner. The
// rows are due again in their place.
const sqlRelease = `
UPDATE ` + sqlRowsOfIDs + `
SET o.locked_by = NULL, o.locked_at = NULL, o.locked_until = NULL
WHERE o.locked_by = ? AND o.status IN (0, 2)`

// sqlOwnedClaims returns the ids of owner's claims made before a time on
// the pending events of a topic, read without locking them: the release
// that follows (sqlReleaseOwned) locks only those rows, and checks the
// claim again. The due index, which pending leads, keeps the read to the
// topic's pending rows; MariaDB would rather scan the table.
const sqlOwnedClaims = `
SELECT event_id FROM {table} FORCE INDEX ({due_idx})
WHERE pending = 1 AND topic = ? AND locked_by = ? AND locked_at < ?`

// sqlReleaseOwned is sqlRelease of the claims made before a time.
const sqlReleaseOwned = sqlRelease + ` AND o.locked_at < ?`

// sqlUpdateStatus applies a batch of RETRY, DEAD and deferral outcomes
// given as the JSON array of sqlcodec.Outcomes: status 0 keeps the
// current status (a deferral). DONE rows are never touched. An outcome
// needs a pending row that the owner still holds or, from no owner, one
// under no running lease (see outboxdriver.Outcome; no owner is NULL),
// and, where it says how many failed attempts the row has before
// it ("before"), that many; an outcome without an error (none in the
// JSON) keeps last_error and error_group, one with an error records its
// group ("group") with it. The rows are joined as in sqlRowsOfIDs.
// Parameters: the batch, now, owner, owner, now. Every assignment reads
// only the column it sets: MySQL sets them in turn, and a later one would
// see the new value of an earlier one.
const sqlUpdateStatus = `
UPDATE JSON_TABLE(?, '$[*]' COLUMNS (
        id              varchar(512)  PATH '$.id',
        status          int           PATH '$.status',
        spent           int           PATH '$.spent',
        next_at         bigint        PATH '$.next_at',
        error           varchar(4000) PATH '$.error',
        error_group     varchar(16)   PATH '$.group',
        attempts_before int           PATH '$.before'
    )) AS u
    STRAIGHT_JOIN {table} AS o FORCE INDEX ({id_idx}) ON o.event_id = unhex(u.id)
SET o.status       = CASE WHEN u.status = 0 THEN o.status ELSE u.status END,
    o.attempts     = o.attempts + u.spent,
    o.available_at = coalesce(u.next_at, o.available_at),
    o.last_error   = coalesce(u.error, o.last_error),
    o.error_group  = CASE WHEN u.error IS NULL THEN o.error_group ELSE u.error_group END,
    o.updated_at   = ?,
    o.locked_by    = NULL,
    o.locked_at    = NULL,
    o.locked_until = NULL
WHERE o.status IN (0, 2) AND (o.locked_by = ?
    OR ? IS NULL AND (o.locked_until IS NULL OR o.locked_until <= ?))
    AND (u.attempts_before IS NULL OR o.attempts = u.attempts_before)`

// sqlMarkDone records the DONE outcomes of a batch: parameters ids (JSON),
// now, now. A DONE applies whoever holds the row, spends no attempt, and
// leaves the due time and the last error as they are. Rows already DONE
// are left alone.
const sqlMarkDone = `
UPDATE ` + sqlRowsOfIDs + `
SET o.status = 1, o.done_at = ?, o.updated_at = ?,
    o.locked_by = NULL, o.locked_at = NULL, o.locked_until = NULL
WHERE o.status <> 1`

// sqlDeleteDone records DONE outcomes under Config.DeleteDone: parameter
// ids (JSON). Like sqlMarkDone, it leaves DONE rows alone.
const sqlDeleteDone = `
DELETE o FROM ` + sqlRowsOfIDs + `
WHERE o.status <> 1`

// sqlBacklog reads a topic's pending rows through the due index.
const sqlBacklog = `SELECT count(*), min(available_at) FROM {table} WHERE pending = 1 AND topic = ?`

// sqlDeadFilter selects DEAD rows; each condition is off when its
// parameter is NULL, and takes it twice (see sqlcodec.DeadFilter): ids (a
// JSON array, in which an empty one matches no row), event type, topic,
// died before, aggregate type, aggregate id, a LIKE pattern of the error
// in lower case, error group, ungrouped (1), died after. status leads the
// DEAD keys (migration 3).
const sqlDeadFilter = `status = 3
    AND (? IS NULL OR event_id IN (SELECT unhex(ids.id) FROM ` + sqlIDs + `))
    AND (? IS NULL OR event_type = ?)
    AND (? IS NULL OR topic = ?)
    AND (? IS NULL OR updated_at < ?)
    AND (? IS NULL OR aggregate_type = ?)
    AND (? IS NULL OR aggregate_id = ?)
    AND (? IS NULL OR lower(last_error) LIKE ? ESCAPE '!')
    AND (? IS NULL OR error_group = ?)
    AND (? IS NULL OR error_group IS NULL AND ? = 1)
    AND (? IS NULL OR updated_at >= ?)`

const sqlQueryDead = `
SELECT ` + eventColumns + ` FROM {table}
WHERE ` + sqlDeadFilter + ` AND event_id > ?
ORDER BY event_id
LIMIT ?`

const sqlCountDead = `SELECT count(*) FROM {table} WHERE ` + sqlDeadFilter

// sqlReplayDead keeps last_error and error_group as the record of why the
// event died. Parameters: now, now, then the filter's.
const sqlReplayDead = `
UPDATE {table} SET status = 0, attempts = 0, available_at = ?, updated_at = ?,
    done_at = NULL, locked_by = NULL, locked_at = NULL, locked_until = NULL
WHERE ` + sqlDeadFilter

// sqlDeadGroups groups the DEAD rows of the filter by error_group, up to a
// limit, the largest first, then by group (NULL first), with the latest
// error of each, one descent of the dead group key (<=> compares NULL
// too). Parameters: the filter's for the sample, the filter's for the
// groups, the limit. sqlDeadGroupTopics returns the topics of every group
// (the filter's parameters): GROUP_CONCAT would be cut at
// group_concat_max_len, and topics can hold its separator.
const (
	sqlDeadGroups = `
SELECT coalesce(g.error_group, ''), g.n, g.first_died, g.last_died, coalesce(
    (SELECT last_error FROM {table}
     WHERE ` + sqlDeadFilter + ` AND error_group <=> g.error_group
     ORDER BY updated_at DESC LIMIT 1), '')
FROM (
    SELECT error_group, count(*) AS n, min(updated_at) AS first_died, max(updated_at) AS last_died
    FROM {table}
    WHERE ` + sqlDeadFilter + `
    GROUP BY error_group
    ORDER BY n DESC, error_group
    LIMIT ?
) AS g
ORDER BY g.n DESC, g.error_group`
	sqlDeadGroupTopics = `
SELECT DISTINCT coalesce(error_group, ''), topic FROM {table}
WHERE ` + sqlDeadFilter
)

// sqlStatsTopics counts the rows by topic and status, with the earliest
// due time of the pending rows due at a time (the parameter). It reads
// the whole table.
const sqlStatsTopics = `
SELECT topic, status, count(*), min(CASE WHEN pending = 1 AND available_at <= ? THEN available_at END)
FROM {table}
GROUP BY topic, status`

// sqlStatsPending is sqlStatsTopics of the pending rows alone, which the
// due index holds.
const sqlStatsPending = `
SELECT topic, status, count(*), min(CASE WHEN available_at <= ? THEN available_at END)
FROM {table}
WHERE pending = 1
GROUP BY topic, status`

// sqlStatsClaims counts the pending rows whose lease runs at a time (the
// parameter), by owner and topic, through the due index.
const sqlStatsClaims = `
SELECT locked_by, topic, count(*), min(locked_at), max(locked_until)
FROM {table}
WHERE pending = 1 AND locked_until > ? AND locked_by IS NOT NULL
GROUP BY locked_by, topic`

// sqlStatsRelays reads the relay heartbeats, their names matching the
// parameter (outboxdriver.HeartbeatPattern).
const sqlStatsRelays = `SELECT owner, until FROM {lease} WHERE name LIKE ?`

// sqlQueryPending pages through pending rows. Parameters: two statuses
// (the same one twice for one), the topic twice (NULL for every topic),
// the id after which the page starts, the page size.
const sqlQueryPending = `
SELECT ` + eventColumns + ` FROM {table}
WHERE pending = 1 AND status IN (?, ?) AND (? IS NULL OR topic = ?) AND event_id > ?
ORDER BY event_id
LIMIT ?`

// sqlQueryEvents pages through the rows of every status. Parameters: the
// id after which the page starts, the page size.
const sqlQueryEvents = `
SELECT ` + eventColumns + ` FROM {table}
WHERE event_id > ?
ORDER BY event_id
LIMIT ?`

// sqlQueryAggregate pages through the rows of one aggregate, newest first,
// reading the aggregate index backwards and filtering by topic as it
// goes. Parameters: the aggregate id and type, the topic twice (NULL for
// every topic), those of {before} (empty or aggregateBefore), the page
// size.
const sqlQueryAggregate = `
SELECT ` + eventColumns + ` FROM {table}
WHERE aggregate_id = ? AND aggregate_type = ? AND (? IS NULL OR topic = ?){before}
ORDER BY created_at DESC, event_id DESC
LIMIT ?`

// aggregateBefore starts the page of sqlQueryAggregate after a row:
// parameters its created_at twice, then its event id. Spelled out rather
// than as a row comparison, which MariaDB does not turn into an index
// range.
const aggregateBefore = `
    AND (created_at < ? OR created_at = ? AND event_id < ?)`

// sqlAcquireLease takes a lease for an owner until a time, or renews it.
// Parameters: name, owner, until, then now. The insert takes a lease
// nobody held; on the duplicate, owner changes only when the owner holds
// it already or the holder's lease ended by now, and until only when the
// owner then holds it (MySQL assigns in turn: the second assignment sees
// the first's owner). The row stays locked until the transaction ends,
// in which sqlLeaseHolder reads who holds it: MySQL's count of changed
// rows cannot tell a renewal to the same time from a refusal.
const (
	sqlAcquireLease = `
INSERT INTO {lease} (name, owner, until) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE
    owner = IF(owner = VALUES(owner) OR until <= ?, VALUES(owner), owner),
    until = IF(owner = VALUES(owner), VALUES(until), until)`
	sqlLeaseHolder = `SELECT owner FROM {lease} WHERE name = ?`
)

// sqlHeartbeat writes a relay's heartbeat, or moves its until. Parameters:
// name, owner, until. MySQL counts 1 changed row for an insert, 2 for an
// update and 0 for a row already so (1 under the client flag
// CLIENT_FOUND_ROWS).
const sqlHeartbeat = `
INSERT INTO {lease} (name, owner, until) VALUES (?, ?, ?)
ON DUPLICATE KEY UPDATE owner = VALUES(owner), until = VALUES(until)`

// sqlExpiredHeartbeats lists relay heartbeats expired before a time, the
// longest expired first. Parameters: the name pattern, now, limit.
const sqlExpiredHeartbeats = `
SELECT name, owner FROM {lease} WHERE name LIKE ? AND until < ? ORDER BY until LIMIT ?`

// sqlDeleteExpiredHeartbeat deletes a heartbeat if it is still expired
// before a time: the reaper whose delete changes the row releases the
// relay's claims, in the same transaction. Parameters: name, now.
const sqlDeleteExpiredHeartbeat = `DELETE FROM {lease} WHERE name = ? AND until < ?`

// sqlClaimsOf returns the ids and topics of an owner's claims on pending
// events, which the release that follows (sqlRelease) ends. The due
// index, which pending leads, keeps the read to the pending rows.
const sqlClaimsOf = `
SELECT event_id, topic FROM {table} FORCE INDEX ({due_idx})
WHERE pending = 1 AND locked_by = ?`

// sqlEndHeartbeat deletes a relay's heartbeat. Parameters: name, owner.
const sqlEndHeartbeat = `DELETE FROM {lease} WHERE name = ? AND owner = ?`

// A purge deletes a batch of rows in a READ COMMITTED transaction of its
// own: the pick (sqlPurgePick, sqlPurgeProcessedPick) locks the batch with
// SKIP LOCKED, passing over rows other transactions hold, which MySQL's
// DELETE cannot, and returns the key of each row as JSON; the delete
// (sqlPurgeDelete, sqlPurgeProcessedDelete) takes them as one array, and
// finds the rows by primary key.

// sqlPurgeDeadPick: the filter's parameters, the batch size.
const sqlPurgeDeadPick = `
SELECT CAST(seq AS CHAR) FROM {table}
WHERE ` + sqlDeadFilter + `
LIMIT ?
FOR UPDATE SKIP LOCKED`

// sqlPurgePick: parameters two statuses (the same one twice for one), the
// cutoff, the batch size. The literal status list keeps to the finished
// index.
const sqlPurgePick = `
SELECT CAST(seq AS CHAR) FROM {table}
WHERE status IN (1, 3) AND status IN (?, ?) AND updated_at < ?
LIMIT ?
FOR UPDATE SKIP LOCKED`

const sqlPurgeDelete = `
DELETE o FROM JSON_TABLE(?, '$[*]' COLUMNS (seq bigint PATH '$')) AS purged
    STRAIGHT_JOIN {table} AS o FORCE INDEX (PRIMARY) ON o.seq = purged.seq`

// sqlMarkProcessed records that a consumer processed an event, at a time,
// in the consumer's transaction: no row when a committed transaction
// recorded it already. While another transaction that recorded it is open,
// the insert waits for its lock, and then records the event only if that
// one rolled back. IGNORE turns the duplicate into no row; the values are
// validated before, so that it hides nothing else.
const sqlMarkProcessed = `INSERT IGNORE INTO {inbox} (consumer, event_id, processed_at) VALUES (?, ?, ?)`

// sqlPurgeProcessedPick: parameters the cutoff, the batch size. The keys
// are the hex of consumer and event id, the delete's join being on bytes.
const sqlPurgeProcessedPick = `
SELECT JSON_ARRAY(hex(consumer), hex(event_id)) FROM {inbox}
WHERE processed_at < ?
LIMIT ?
FOR UPDATE SKIP LOCKED`

const sqlPurgeProcessedDelete = `
DELETE i FROM JSON_TABLE(?, '$[*]' COLUMNS (consumer varchar(1024) PATH '$[0]', event_id varchar(2040) PATH '$[1]')) AS purged
    STRAIGHT_JOIN {inbox} AS i FORCE INDEX (PRIMARY)
    ON i.consumer = unhex(purged.consumer) AND i.event_id = unhex(purged.event_id)`

// statements holds the SQL rendered for one table.
type statements struct {
	createMigrationTable, migrationVersion, recordMigration string
	appliedMigrations                                       string
	script                                                  migrationfiles.Recorder

	undoInsert, keyHolders                 string
	existing, existingOne, get             string
	lease, release, updateStatus           string
	ownedClaims, releaseOwned              string
	markDone, deleteDone                   string    // deleteDone empty unless Config.DeleteDone
	claim                                  [2]string // by ordered (0, 1)
	claimAfter                             string    // unordered, with a cursor
	runsAfter, lockRun                     string    // a claim with runs: what follows the heads
	queryDead, countDead, replayDead       string
	deadGroups, deadGroupTopics            string
	statsTopics, statsPending, statsClaims string
	statsRelays                            string
	queryPending, queryEvents              string
	queryAggregate, queryAggregateBefore   string
	acquireLease, leaseHolder              string
	heartbeat, expiredHeartbeats           string
	deleteExpiredHeartbeat, claimsOf       string
	endHeartbeat                           string
	backlog                                string
	purgePick, purgeDelete                 string
	purgeDeadPick                          string
	markProcessed                          string
	purgeProcessedPick                     string
	purgeProcessedDelete                   string

	table string // quoted, for the insert's text, which depends on the batch
}

func renderStatements(quoted, idIndex, dueIndex, idemIndex, inbox, lease, migrations string, deleteDone bool) statements {
	r := strings.NewReplacer("{table}", quoted, "{id_idx}", idIndex, "{due_idx}", dueIndex, "{idem_idx}", idemIndex,
		"{inbox}", inbox, "{lease}", lease, "{migrations}", migrations)
	s := statements{
		createMigrationTable:   r.Replace(sqlCreateMigrationTable),
		migrationVersion:       r.Replace(sqlMigrationVersion),
		recordMigration:        r.Replace(sqlRecordMigration),
		appliedMigrations:      r.Replace(sqlAppliedMigrations),
		undoInsert:             r.Replace(sqlUndoInsert),
		keyHolders:             r.Replace(sqlKeyHolders),
		existing:               r.Replace(sqlExisting),
		existingOne:            r.Replace(sqlExistingOne),
		get:                    r.Replace(sqlGet),
		lease:                  r.Replace(sqlLease),
		runsAfter:              r.Replace(sqlRunsAfter),
		lockRun:                r.Replace(sqlLockRun),
		release:                r.Replace(sqlRelease),
		ownedClaims:            r.Replace(sqlOwnedClaims),
		releaseOwned:           r.Replace(sqlReleaseOwned),
		updateStatus:           r.Replace(sqlUpdateStatus),
		markDone:               r.Replace(sqlMarkDone),
		queryDead:              r.Replace(sqlQueryDead),
		countDead:              r.Replace(sqlCountDead),
		replayDead:             r.Replace(sqlReplayDead),
		purgePick:              r.Replace(sqlPurgePick),
		purgeDeadPick:          r.Replace(sqlPurgeDeadPick),
		deadGroups:             r.Replace(sqlDeadGroups),
		deadGroupTopics:        r.Replace(sqlDeadGroupTopics),
		statsTopics:            r.Replace(sqlStatsTopics),
		statsPending:           r.Replace(sqlStatsPending),
		statsClaims:            r.Replace(sqlStatsClaims),
		statsRelays:            r.Replace(sqlStatsRelays),
		queryPending:           r.Replace(sqlQueryPending),
		queryEvents:            r.Replace(sqlQueryEvents),
		queryAggregate:         r.Replace(strings.Replace(sqlQueryAggregate, "{before}", "", 1)),
		queryAggregateBefore:   r.Replace(strings.Replace(sqlQueryAggregate, "{before}", aggregateBefore, 1)),
		acquireLease:           r.Replace(sqlAcquireLease),
		leaseHolder:            r.Replace(sqlLeaseHolder),
		heartbeat:              r.Replace(sqlHeartbeat),
		expiredHeartbeats:      r.Replace(sqlExpiredHeartbeats),
		deleteExpiredHeartbeat: r.Replace(sqlDeleteExpiredHeartbeat),
		claimsOf:               r.Replace(sqlClaimsOf),
		endHeartbeat:           r.Replace(sqlEndHeartbeat),
		purgeDelete:            r.Replace(sqlPurgeDelete),
		backlog:                r.Replace(sqlBacklog),
		markProcessed:          r.Replace(sqlMarkProcessed),
		purgeProcessedPick:     r.Replace(sqlPurgeProcessedPick),
		purgeProcessedDelete:   r.Replace(sqlPurgeProcessedDelete),
		table:                  quoted,
	}
	s.script = migrationfiles.Recorder{
		CreateTable: r.Replace(sqlCreateMigrationTable),
		Record:      r.Replace(sqlScriptRecordMigration),
		Unrecord:    r.Replace(sqlScriptUnrecordMigration),
	}
	if deleteDone {
		s.deleteDone = r.Replace(sqlDeleteDone)
	}
	for ordered, head := range []string{"", orderedHeads()} {
		claim := strings.Replace(sqlClaim, "{ordered}", head, 1)
		s.claim[ordered] = r.Replace(strings.Replace(claim, "{cursor}", "", 1))
		if ordered == 0 {
			s.claimAfter = r.Replace(strings.Replace(claim, "{cursor}", cursorAfter, 1))
		}
	}
	return s
}

// insert returns sqlInsert for n rows.
func (s *statements) insert(n int) string {
	rows := strings.Repeat(insertValues+", ", n-1) + insertValues
	return strings.NewReplacer("{table}", s.table, "{rows}", rows).Replace(sqlInsert)
}
