package sqlite

import (
	"strings"

	"github.com/wmoutbox/wmoutbox/internal/ident"
	"github.com/wmoutbox/wmoutbox/internal/migrationfiles"
)

// Every SQL statement of the SQLite store, except the migrations (see the
// migrations folder). {table}, {inbox}, {lease} and {migrations} stand for
// the quoted names;
// every value is a bind parameter (?N is the N-th argument). Times are
// INTEGER unix microseconds; lists travel as one JSON array, read with
// json_each, event ids in it as hex (see sqlcodec.HexIDs).

const sqlCreateMigrationTable = `
CREATE TABLE IF NOT EXISTS {migrations} (
    table_name TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL,
    PRIMARY KEY (table_name, version)
) STRICT`

const sqlMigrationVersion = `SELECT coalesce(max(version), 0) FROM {migrations} WHERE table_name = ?1`

const sqlRecordMigration = `INSERT INTO {migrations} (table_name, version, name, applied_at) VALUES (?1, ?2, ?3, ?4)`

// sqlMigrationTableExists tells whether the database holds the migration
// table, ?1 being its name.
const sqlMigrationTableExists = `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1`

const sqlAppliedMigrations = `
SELECT version, name, applied_at FROM {migrations} WHERE table_name = ?1 ORDER BY version`

// The records of a migration script (see MigrationScripts), where values
// are literals ({table_name}, {version}, {file}) and the time is SQLite's,
// in unix microseconds: recording a migration twice is a no-op.
const (
	sqlScriptRecordMigration = `
INSERT INTO {migrations} (table_name, version, name, applied_at)
VALUES ({table_name}, {version}, {file}, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))
ON CONFLICT DO NOTHING`
	sqlScriptUnrecordMigration = `DELETE FROM {migrations} WHERE table_name = {table_name} AND version = {version}`
)

// sqlBeginImmediate takes the database's write lock at once, so that a
// transaction never has to upgrade a read lock (which fails with
// SQLITE_BUSY instead of waiting when another writer got there first).
const (
	sqlBeginImmediate = `BEGIN IMMEDIATE`
	sqlCommit         = `COMMIT`
	sqlRollback       = `ROLLBACK`
)

// eventColumns is what every read returns, in the order sqlcodec.QueryRows
// expects.
const eventColumns = `event_id, event_type, topic, aggregate_type,
    coalesce(aggregate_id, ''), coalesce(tenant_id, ''), payload, payload_json, headers,
    status, attempts, occurred_at, available_at, created_at, updated_at, done_at,
    coalesce(last_error, ''), coalesce(locked_by, ''), locked_at, locked_until, coalesce(error_group, ''),
    coalesce(idempotency_key, '')`

// The savepoint around a batch insert: SQLite keeps a transaction usable
// after a failed statement, so the batch is undone as a whole when one row
// fails and the caller's transaction holds all of it or none.
const (
	sqlInsertSavepoint = `SAVEPOINT wmoutbox_insert`
	sqlInsertRelease   = `RELEASE wmoutbox_insert`
	sqlInsertUndo      = `ROLLBACK TO wmoutbox_insert`
)

// sqlInsert writes one row; Insert runs it, prepared, for every event of a
// batch, with the values of sqlcodec.InsertValues: ?12 and ?13 are the
// write time; ?14, ?15 and ?16 are the claim (owner, time, end of the
// lease) of a pre-claimed row, NULL otherwise; ?17 the idempotency key,
// NULL for none. A row whose topic and key another row has is not
// written: the statement changes no row.
const sqlInsert = `
INSERT INTO {table} (event_id, event_type, topic, aggregate_type, aggregate_id, tenant_id,
    payload, payload_json, headers, status, attempts,
    occurred_at, available_at, created_at, updated_at, locked_by, locked_at, locked_until, idempotency_key)
VALUES (?1, ?2, ?3, ?4, ?5, ?6,
    ?7, ?8, ?9, 0, 0,
    ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
ON CONFLICT (topic, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`

// sqlKeyHolder returns the event id of the row of topic ?1 with the
// idempotency key ?2.
const sqlKeyHolder = `
SELECT event_id FROM {table} WHERE topic = ?1 AND idempotency_key = ?2 AND idempotency_key IS NOT NULL`

// sqlExisting returns those of the event ids of sqlcodec.HexIDs(ids),
// passed as ?1, that have a row; sqlExistingOne does for one id, ?1, what
// most business transactions write, without the JSON.
const (
	sqlExisting    = `SELECT event_id FROM {table} WHERE event_id IN (` + sqlIDs + `)`
	sqlExistingOne = `SELECT event_id FROM {table} WHERE event_id = ?1`
)

const sqlGet = `SELECT ` + eventColumns + ` FROM {table} WHERE event_id = ?1`

// sqlClaim records owner ?4's claim (locked_by, locked_at ?1,
// locked_until ?5) on up to ?3 due rows of topic ?6, taken in due order,
// and returns them, in no set order. A row is due at ?1 if it was written
// by ?2 (skip-recent) and no lease runs on it (locked_until); rows claimed
// before migration 2 have no locked_until: their claim moved available_at
// to the end of the lease. Plain equality on the topic lets the due index
// serve the order too.
//
// Being a write, this statement takes SQLite's write lock when it starts,
// before it reads anything, waiting up to the busy timeout: claimers take
// turns, and each one reads only rows no earlier claim holds. {ordered}
// passes over the events that must wait for an earlier one of their
// aggregate (see orderedHead).
const sqlClaim = `
UPDATE {table} SET locked_by = ?4, locked_at = ?1, locked_until = ?5
WHERE event_id IN (
    SELECT event_id FROM {table} AS t
    WHERE status IN (0, 2) AND topic = ?6 AND available_at <= ?1 AND (created_at <= ?2 OR status = 2 OR available_at > created_at)
        AND (locked_until IS NULL OR locked_until <= ?1) {ordered}
    ORDER BY available_at, event_id
    LIMIT ?3
)
RETURNING ` + eventColumns

// orderedHead is sqlClaim's {ordered} for an ordered claim: a row is
// claimed only if no earlier row of its topic and aggregate is pending or
// DEAD; a row without an aggregate id (NULL, or empty from a writer other
// than this package's, which the store reads back as none) always is.
// Earlier is by rowid: the table has no INTEGER PRIMARY KEY, so each
// insert takes a rowid above every row's in the table, and VACUUM, which
// may renumber rows, copies them in rowid order. The aggregate index
// (migration 4) answers each probe; its predicate is spelled out so that
// SQLite uses it.
const orderedHead = `AND NOT EXISTS (
        SELECT 1 FROM {table} AS p
        WHERE p.topic = t.topic AND p.aggregate_type = t.aggregate_type AND p.aggregate_id = t.aggregate_id
            AND p.aggregate_id IS NOT NULL AND p.status <> 1 AND p.rowid < t.rowid
            AND t.aggregate_id <> '')`

// sqlRunAfter reads, for a claim with runs (see
// outboxdriver.ClaimParams.RunLength), the first ?5 events not DONE of
// topic ?1 and aggregate ?2, ?3 after the head at rowid ?4, in insert
// order, on the aggregate index; the driver keeps as many as are due.
// The claim's transaction holds the write lock: they stay as read.
const sqlRunAfter = `SELECT ` + eventColumns + ` FROM {table}
WHERE topic = ?1 AND aggregate_type = ?2 AND aggregate_id = ?3 AND aggregate_id IS NOT NULL
    AND status <> 1 AND rowid > ?4
ORDER BY rowid
LIMIT ?5`

// sqlLeaseRun records owner ?2's claim (locked_at ?3, locked_until ?4) on
// the events of a run, sqlcodec.HexIDs(ids) as ?1.
const sqlLeaseRun = `
UPDATE {table} SET locked_by = ?2, locked_at = ?3, locked_until = ?4
WHERE event_id IN (` + sqlIDs + `)`

// sqlIDs reads the event ids of sqlcodec.HexIDs(ids) passed as ?1.
const sqlIDs = `SELECT CAST(unhex(value) AS TEXT) FROM json_each(?1)`

// sqlRelease ends owner ?2's claims; the rows are due again in their place.
const sqlRelease = `
UPDATE {table} SET locked_by = NULL, locked_at = NULL, locked_until = NULL
WHERE event_id IN (` + sqlIDs + `) AND locked_by = ?2 AND status IN (0, 2)`

// sqlReleaseOwned ends owner ?2's claims made before ?3 on the pending
// events of topic ?1.
const sqlReleaseOwned = `
UPDATE {table} SET locked_by = NULL, locked_at = NULL, locked_until = NULL
WHERE topic = ?1 AND status IN (0, 2) AND locked_by = ?2 AND locked_at < ?3`

// sqlUpdateStatus applies a batch of RETRY, DEAD and deferral outcomes
// reported by owner ?3, given as a JSON array of {"id" (hex), "status",
// "spent", "next_at", "error", "group", "before"} objects (an outcome with
// an error records its group, error_group, with it): status 0 keeps the current
// status (a deferral). DONE rows are never touched. An outcome needs a pending
// row that ?3 still holds or, from no owner, one under no running lease (see
// outboxdriver.Outcome; a claim from before migration 2 has no
// locked_until and runs until available_at), and, where it says how many
// failed attempts the row has before it ("before"), that many.
const sqlUpdateStatus = `
UPDATE {table} AS o SET
    status       = CASE WHEN u.status = 0 THEN o.status ELSE u.status END,
    attempts     = o.attempts + u.spent,
    available_at = coalesce(u.next_at, o.available_at),
    last_error   = coalesce(nullif(u.error, ''), o.last_error),
    error_group  = CASE WHEN coalesce(u.error, '') = '' THEN o.error_group ELSE u.error_group END,
    updated_at   = ?1,
    locked_by    = NULL,
    locked_at    = NULL,
    locked_until = NULL
FROM (
    SELECT CAST(unhex(value ->> '$.id') AS TEXT) AS event_id, value ->> '$.status' AS status, value ->> '$.spent' AS spent,
        value ->> '$.next_at' AS next_at, value ->> '$.error' AS error, value ->> '$.before' AS attempts_before,
        value ->> '$.group' AS error_group
    FROM json_each(?2)
) AS u
WHERE o.event_id = u.event_id AND o.status IN (0, 2) AND (o.locked_by = ?3
    OR ?3 = '' AND (o.locked_until <= ?1 OR o.locked_until IS NULL AND (o.locked_by IS NULL OR o.available_at <= ?1)))
    AND (u.attempts_before IS NULL OR o.attempts = u.attempts_before)`

// sqlMarkDone records the DONE outcomes of a batch, given as a JSON array
// of ids (?1), at ?2: a DONE applies whoever holds the row, spends no
// attempt, and leaves the due time and the last error as they are. Rows
// already DONE are left alone.
const sqlMarkDone = `
UPDATE {table} SET status = 1, done_at = ?2, updated_at = ?2,
    locked_by = NULL, locked_at = NULL, locked_until = NULL
WHERE event_id IN (` + sqlIDs + `) AND status <> 1`

// sqlDeleteDone records DONE outcomes under Config.DeleteDone, given as a
// JSON array of ids. Like sqlMarkDone, it leaves DONE rows alone.
const sqlDeleteDone = `
DELETE FROM {table} WHERE event_id IN (` + sqlIDs + `) AND status <> 1`

// sqlBacklog reads a topic's pending rows through the due index.
const sqlBacklog = `SELECT count(*), min(available_at) FROM {table} WHERE status IN (0, 2) AND topic = ?1`

// sqlDeadFilter selects DEAD rows; each condition is off when its
// parameter is NULL (see sqlcodec.DeadFilter); an empty id array matches
// no row. ?1 ids (a JSON array), ?2 event type, ?3 topic, ?4 died before,
// ?5 aggregate type, ?6 aggregate id, ?7 a LIKE pattern of the error (LIKE
// ignores the case of ASCII letters), ?8 error group, ?9 ungrouped, ?10
// died after. status = 3 is the condition of the DEAD indexes (migration
// 5), and the literal status list the finished index's, which SQLite's
// planner matches term for term.
const sqlDeadFilter = `status IN (1, 3) AND status = 3
    AND (?1 IS NULL OR event_id IN (` + sqlIDs + `))
    AND (?2 IS NULL OR event_type = ?2)
    AND (?3 IS NULL OR topic = ?3)
    AND (?4 IS NULL OR updated_at < ?4)
    AND (?5 IS NULL OR aggregate_type = ?5)
    AND (?6 IS NULL OR aggregate_id = ?6)
    AND (?7 IS NULL OR last_error LIKE ?7 ESCAPE '!')
    AND (?8 IS NULL OR error_group = ?8)
    AND (?9 IS NULL OR error_group IS NULL)
    AND (?10 IS NULL OR updated_at >= ?10)`

const sqlQueryDead = `
SELECT ` + eventColumns + ` FROM {table}
WHERE ` + sqlDeadFilter + ` AND event_id > ?11
ORDER BY event_id
LIMIT ?12`

const sqlCountDead = `SELECT count(*) FROM {table} WHERE ` + sqlDeadFilter

// sqlReplayDead keeps last_error and error_group as the record of why the
// event died. ?11 is now.
const sqlReplayDead = `
UPDATE {table} SET status = 0, attempts = 0, available_at = ?11, updated_at = ?11,
    done_at = NULL, locked_by = NULL, locked_at = NULL, locked_until = NULL
WHERE ` + sqlDeadFilter

// sqlPurgeDead deletes one batch of up to ?11 DEAD rows of the filter
// (each statement is its own transaction).
const sqlPurgeDead = `
DELETE FROM {table} WHERE event_id IN (
    SELECT event_id FROM {table}
    WHERE ` + sqlDeadFilter + `
    LIMIT ?11
)`

// sqlDeadGroups groups the DEAD rows of the filter by error_group, up to
// ?11 groups, the largest first, then by group (NULL first), with the
// latest error of each: one descent of the dead group index (IS compares
// NULL too). sqlDeadGroupTopics returns the topics of every group.
const (
	sqlDeadGroups = `
SELECT coalesce(g.error_group, ''), g.n, g.first_died, g.last_died, coalesce(
    (SELECT last_error FROM {table}
     WHERE ` + sqlDeadFilter + ` AND error_group IS g.error_group
     ORDER BY updated_at DESC LIMIT 1), '')
FROM (
    SELECT error_group, count(*) AS n, min(updated_at) AS first_died, max(updated_at) AS last_died
    FROM {table}
    WHERE ` + sqlDeadFilter + `
    GROUP BY error_group
    ORDER BY n DESC, error_group
    LIMIT ?11
) AS g
ORDER BY g.n DESC, g.error_group`
	sqlDeadGroupTopics = `
SELECT DISTINCT coalesce(error_group, ''), topic FROM {table}
WHERE ` + sqlDeadFilter
)

// sqlStatsTopics counts the rows by topic and status, with the earliest
// due time of the pending rows due at ?1. It reads the whole table.
const sqlStatsTopics = `
SELECT topic, status, count(*), min(CASE WHEN status IN (0, 2) AND available_at <= ?1 THEN available_at END)
FROM {table}
GROUP BY topic, status`

// sqlStatsPending is sqlStatsTopics of the pending rows alone, which the
// due index holds.
const sqlStatsPending = `
SELECT topic, status, count(*), min(CASE WHEN available_at <= ?1 THEN available_at END)
FROM {table}
WHERE status IN (0, 2)
GROUP BY topic, status`

// sqlStatsClaims counts the pending rows whose lease runs at ?1, by owner
// and topic.
const sqlStatsClaims = `
SELECT locked_by, topic, count(*), min(locked_at), max(locked_until)
FROM {table}
WHERE status IN (0, 2) AND locked_until > ?1 AND locked_by IS NOT NULL
GROUP BY locked_by, topic`

// sqlStatsRelays reads the relay heartbeats, their names matching ?1
// (outboxdriver.HeartbeatPattern).
const sqlStatsRelays = `SELECT owner, until FROM {lease} WHERE name LIKE ?1`

// sqlQueryPending pages through the pending rows of statuses ?1 (a JSON
// array, a subset of NEW and RETRY), of topic ?2 unless it is NULL, after
// event id ?3, up to ?4 of them.
const sqlQueryPending = `
SELECT ` + eventColumns + ` FROM {table}
WHERE status IN (0, 2) AND status IN (SELECT value FROM json_each(?1)) AND (?2 IS NULL OR topic = ?2)
    AND event_id > ?3
ORDER BY event_id
LIMIT ?4`

// sqlQueryEvents pages through the rows of every status after event id
// ?1, up to ?2 of them.
const sqlQueryEvents = `
SELECT ` + eventColumns + ` FROM {table}
WHERE event_id > ?1
ORDER BY event_id
LIMIT ?2`

// sqlQueryAggregate pages through the rows of aggregate id ?1 of type ?2,
// of topic ?3 unless it is NULL, newest first, up to ?4 of them; {before}
// is empty or aggregateBefore. It reads the aggregate index backwards,
// filtering by topic as it goes. The index is partial: the statement
// spells out its condition rather than leave the planner to infer it from
// the equality.
const sqlQueryAggregate = `
SELECT ` + eventColumns + ` FROM {table}
WHERE aggregate_id = ?1 AND aggregate_id IS NOT NULL AND aggregate_type = ?2
    AND (?3 IS NULL OR topic = ?3){before}
ORDER BY created_at DESC, event_id DESC
LIMIT ?4`

// aggregateBefore starts the page of sqlQueryAggregate after the row
// created at ?5 with event id ?6: where the index scan starts.
const aggregateBefore = `
    AND (created_at, event_id) < (?5, ?6)`

// sqlAcquireLease takes lease ?1 for owner ?2 until ?4, or renews it: the
// insert takes a lease nobody held; on the conflict, the update applies
// only when ?2 holds it already or its holder's lease ended by ?3. It
// changes a row when ?2 holds the lease. SQLite has one writer at a time,
// so that concurrent takers take turns.
const sqlAcquireLease = `
INSERT INTO {lease} (name, owner, until) VALUES (?1, ?2, ?4)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until = excluded.until
WHERE owner = excluded.owner OR until <= ?3`

// sqlHeartbeatRenew moves the until of heartbeat ?1 to ?3, and
// sqlHeartbeatInsert writes it when the renewal found no row: a relay that
// is new, or whose claims were released as it was presumed dead.
const (
	sqlHeartbeatRenew  = `UPDATE {lease} SET owner = ?2, until = ?3 WHERE name = ?1`
	sqlHeartbeatInsert = `
INSERT INTO {lease} (name, owner, until) VALUES (?1, ?2, ?3)
ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until = excluded.until`
)

// sqlExpiredHeartbeats lists up to ?3 relay heartbeats (names like ?1)
// expired before ?2, the longest expired first.
const sqlExpiredHeartbeats = `
SELECT name, owner FROM {lease} WHERE name LIKE ?1 AND until < ?2 ORDER BY until LIMIT ?3`

// sqlDeleteExpiredHeartbeat deletes heartbeat ?1 if it is still expired
// before ?2: the reaper whose delete changes the row releases the relay's
// claims (sqlReleaseAllOwned), in the same transaction.
const sqlDeleteExpiredHeartbeat = `DELETE FROM {lease} WHERE name = ?1 AND until < ?2`

// sqlReleaseAllOwned ends owner ?1's claims on the pending events, which
// are due again in their place, and returns the topic of each.
const sqlReleaseAllOwned = `
UPDATE {table} SET locked_by = NULL, locked_at = NULL, locked_until = NULL
WHERE status IN (0, 2) AND locked_by = ?1
RETURNING topic`

// sqlEndHeartbeat deletes heartbeat ?1 of owner ?2.
const sqlEndHeartbeat = `DELETE FROM {lease} WHERE name = ?1 AND owner = ?2`

// sqlPurge deletes one batch (each statement is its own transaction); the
// literal status list lets the planner use the partial index whatever the
// parameter, a JSON array of statuses.
const sqlPurge = `
DELETE FROM {table} WHERE event_id IN (
    SELECT event_id FROM {table}
    WHERE status IN (1, 3) AND status IN (SELECT value FROM json_each(?1)) AND updated_at < ?2
    LIMIT ?3
)`

// sqlMarkProcessed records that consumer ?1 processed event ?2, at ?3, in
// the consumer's transaction: no row when a committed transaction
// recorded it already. SQLite has one writer at a time, so a transaction
// that recorded it and is still open holds this one back, for at most the
// busy timeout ([BusyTimeout]).
const sqlMarkProcessed = `
INSERT INTO {inbox} (consumer, event_id, processed_at) VALUES (?1, ?2, ?3)
ON CONFLICT DO NOTHING`

// sqlPurgeProcessed deletes one batch of inbox records older than ?1.
const sqlPurgeProcessed = `
DELETE FROM {inbox} WHERE (consumer, event_id) IN (
    SELECT consumer, event_id FROM {inbox}
    WHERE processed_at < ?1
    LIMIT ?2
)`

// statements holds the SQL rendered for one table.
type statements struct {
	createMigrationTable, migrationVersion, recordMigration string
	appliedMigrations                                       string
	script                                                  migrationfiles.Recorder

	insert, existing, existingOne, get      string
	keyHolder                               string
	release, releaseOwned                   string
	updateStatus                            string
	markDone, deleteDone                    string    // deleteDone empty unless Config.DeleteDone
	claim                                   [2]string // by ordered (0, 1)
	claimHeads, runAfter, leaseRun          string    // a claim with runs: the heads with their rowid, what follows
	queryDead, countDead, replayDead        string
	purgeDead, queryPending                 string
	queryEvents                             string
	queryAggregate, queryAggregateBefore    string
	deadGroups, deadGroupTopics             string
	statsTopics, statsPending, statsClaims  string
	statsRelays                             string
	acquireLease                            string
	heartbeatRenew, heartbeatInsert         string
	expiredHeartbeats, endHeartbeat         string
	deleteExpiredHeartbeat, releaseAllOwned string
	backlog                                 string
	purge                                   string
	markProcessed, purgeProcessed           string
}

func renderStatements(quoted, inbox, lease string, deleteDone bool) statements {
	r := strings.NewReplacer("{table}", quoted, "{inbox}", inbox, "{lease}", lease, "{migrations}", ident.Quote(ident.MigrationTable))
	s := statements{
		createMigrationTable:   r.Replace(sqlCreateMigrationTable),
		migrationVersion:       r.Replace(sqlMigrationVersion),
		recordMigration:        r.Replace(sqlRecordMigration),
		appliedMigrations:      r.Replace(sqlAppliedMigrations),
		insert:                 r.Replace(sqlInsert),
		existing:               r.Replace(sqlExisting),
		existingOne:            r.Replace(sqlExistingOne),
		keyHolder:              r.Replace(sqlKeyHolder),
		get:                    r.Replace(sqlGet),
		release:                r.Replace(sqlRelease),
		releaseOwned:           r.Replace(sqlReleaseOwned),
		updateStatus:           r.Replace(sqlUpdateStatus),
		markDone:               r.Replace(sqlMarkDone),
		queryDead:              r.Replace(sqlQueryDead),
		countDead:              r.Replace(sqlCountDead),
		replayDead:             r.Replace(sqlReplayDead),
		purgeDead:              r.Replace(sqlPurgeDead),
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
		heartbeatRenew:         r.Replace(sqlHeartbeatRenew),
		heartbeatInsert:        r.Replace(sqlHeartbeatInsert),
		expiredHeartbeats:      r.Replace(sqlExpiredHeartbeats),
		deleteExpiredHeartbeat: r.Replace(sqlDeleteExpiredHeartbeat),
		releaseAllOwned:        r.Replace(sqlReleaseAllOwned),
		endHeartbeat:           r.Replace(sqlEndHeartbeat),
		purge:                  r.Replace(sqlPurge),
		backlog:                r.Replace(sqlBacklog),
		markProcessed:          r.Replace(sqlMarkProcessed),
		purgeProcessed:         r.Replace(sqlPurgeProcessed),
	}
	s.script = migrationfiles.Recorder{
		CreateTable: r.Replace(sqlCreateMigrationTable),
		Record:      r.Replace(sqlScriptRecordMigration),
		Unrecord:    r.Replace(sqlScriptUnrecordMigration),
	}
	if deleteDone {
		s.deleteDone = r.Replace(sqlDeleteDone)
	}
	for ordered, head := range []string{"", orderedHead} {
		s.claim[ordered] = r.Replace(strings.Replace(sqlClaim, "{ordered}", head, 1))
	}
	s.claimHeads = s.claim[1] + ", rowid"
	s.runAfter = r.Replace(sqlRunAfter)
	s.leaseRun = r.Replace(sqlLeaseRun)
	return s
}
