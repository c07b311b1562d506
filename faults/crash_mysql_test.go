//go:build faults

package faults

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	// scenarioMySQLCrash makes a child process a crash-scenario relay on
	// MySQL (see runMySQLRelayProcess).
	scenarioMySQLCrash = "mysql-crash"
	// mysqlCrashKills is fewer than crashKills: the suite runs on two
	// cores, and the PostgreSQL scenario covers the relay's side at length.
	mysqlCrashKills = 8
	// mysqlCrashMaxTarget bounds the deliveries a victim makes before it
	// is killed (1 to this many, at random).
	mysqlCrashMaxTarget = 120
)

// TestCrashedRelayProcessMySQL is TestCrashedRelayProcess on the MySQL
// store: a relay process is killed with SIGKILL 8 times mid-batch while
// writers keep writing; a second relay process runs throughout and takes
// the dead one's claims over when their leases end. MySQL has no
// LISTEN/NOTIFY: both relays learn of the writers' events by polling
// (crashPollInterval, 50 ms). Every committed event is delivered;
// duplicates are only events the killed relay held when it died.
func TestCrashedRelayProcessMySQL(t *testing.T) {
	t.Parallel()
	dsn := testmysql.DSN(t)
	db := openMySQL(t, dsn, 6)
	l := newMySQLLedger(t, db, "crash-mysql")
	store := openMySQLStore(t, db)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)

	ws := startWriters(t, l, writerConfig{
		writers: 2, batch: 5, randomBatch: true, pause: 3 * time.Millisecond, rollbackEvery: 10,
		write: writeWithWriterMySQL(store, writer, crashTopic),
	})
	child := envScenario + "=" + scenarioMySQLCrash
	survivor := startRelayProcess(t, dsn, "crash-survivor", child)

	inFlight := make([]int64, 0, mysqlCrashKills)
	for kill := 1; kill <= mysqlCrashKills; kill++ {
		owner := fmt.Sprintf("crash-victim-%02d", kill)
		victim := startRelayProcess(t, dsn, owner, child)
		target := 1 + rand.IntN(mysqlCrashMaxTarget)
		waitFor(t, owner+" delivering", 30*time.Second, func() (bool, string) {
			var n int
			if err := db.QueryRowContext(t.Context(), `SELECT count(*) FROM fault_delivered WHERE by_relay = ?`, owner).Scan(&n); err != nil {
				return false, err.Error()
			}
			return n >= target, fmt.Sprintf("%d of %d deliveries; writers %s; %s", n, target, ws, victim.output())
		})
		victim.kill(t)
		var held int64
		require.NoError(t, db.QueryRowContext(t.Context(),
			`SELECT count(*) FROM outbox_event WHERE locked_by = ? AND status IN (0, 2)`, owner).Scan(&held))
		inFlight = append(inFlight, held)
	}
	ws.stop()

	f := l.waitDelivered(t, 60*time.Second)
	survivor.stop(t)

	st, err := mysqlOutboxState(t.Context(), db)
	require.NoError(t, err)
	var bound int64
	for i, held := range inFlight {
		require.LessOrEqual(t, held, int64(crashWorkers+crashColdQueue+settlerBacklog),
			"kill %d: a relay never holds more than workers + cold queue + settler backlog", i+1)
		bound += held
	}
	var survivorDelivered int64
	require.NoError(t, db.QueryRowContext(t.Context(),
		`SELECT count(DISTINCT event_id) FROM fault_delivered WHERE by_relay = 'crash-survivor'`).Scan(&survivorDelivered))
	l.report(t, f, 1, mysqlCrashKills, fmt.Sprintf("in_flight_at_kills=%d survivor_deliveries=%d", bound, survivorDelivered),
		fmt.Sprintf("writer_failures=%d", ws.failures.Load()))

	requireRecoveredFromKills(t, f, st, bound, inFlight)
}

// runMySQLRelayProcess is the child role of TestCrashedRelayProcessMySQL:
// runRelayProcess's crash relay on the MySQL store of the DSN in
// envDatabase, recording each delivery in the ledger before acking.
func runMySQLRelayProcess(owner string, fail func(what string, err error) int) int {
	db, err := testmysql.Open(os.Getenv(envDatabase))
	if err != nil {
		return fail("open database", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(6)
	db.SetMaxIdleConns(6)
	store, err := mysql.NewStore(db, mysql.Config{})
	if err != nil {
		return fail("store", err)
	}
	sub, err := watermilladapter.NewSubscriber(store, crashSubscriberConfig(owner))
	if err != nil {
		return fail("subscriber", err)
	}
	handler := func(msg *message.Message) error {
		return recordDeliveredMySQL(msg.Context(), db, msg.Metadata.Get(watermilladapter.MetadataEventID), owner)
	}
	return runRelay(sub, crashTopic, handler, fail)
}

// openMySQL opens a pool of at most maxConns connections on dsn, closed at
// cleanup (before testmysql drops the database: cleanups run last first).
func openMySQL(t *testing.T, dsn string, maxConns int) *sql.DB {
	t.Helper()
	db, err := testmysql.Open(dsn)
	require.NoError(t, err)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	return db
}
