//go:build faults

package faults

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/relaytest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

const (
	dbRestarts     = 10
	dbRestartTopic = "dbrestart"
)

// TestDatabaseRestart restarts the test database ten times while writers
// write and a relay delivers: every backend of it is terminated, as a
// restart of PostgreSQL would, without disturbing the other databases of
// the server; every other time the database also refuses connections for
// 0.2-1 s, as a server that is starting up does. Writers see errors and
// retry; the relay's pool reconnects on its own; every committed event is
// delivered, and no claim is left behind.
func TestDatabaseRestart(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	pool := openPool(t, url, 8)
	l := newLedger(t, pool, "dbrestart")
	relayLog := &errorLog{}
	r := relaytest.Start(t, pool, watermilladapter.SubscriberConfig{
		PollInterval: 50 * time.Millisecond,
		// The lease ends the claims whose outcome or release was lost with
		// a connection, or whose commit the writer saw fail but the server
		// made. Longer than an outage plus the settler's retry pause, or
		// the stalled outcomes' events would be claimed and delivered
		// again while their first delivery waits to be recorded.
		LockTimeout: 10 * time.Second,
		// Handler failures are not what this scenario is about: the
		// handler records in memory and never fails.
		RetryPolicy: outbox.Backoff{Base: 20 * time.Millisecond, Max: 500 * time.Millisecond, MaxAttempts: 100},
		Logger:      slog.New(relayLog),
	}, relaytest.Handlers{dbRestartTopic: l.handler})

	ws := startWriters(t, l, writerConfig{
		writers: 3, batch: 5, randomBatch: true, pause: 2 * time.Millisecond, rollbackEvery: 10,
		write: writeWithPublisher(r.Store, r.Pub, dbRestartTopic, nil),
	})

	db := newDatabaseSwitch(t, url)
	var terminated int64
	var down time.Duration
	for i := range dbRestarts {
		// Under load: wait for writes to go through since the last restart.
		before := ws.commits.Load()
		waitFor(t, "writes between restarts", 30*time.Second, func() (bool, string) {
			return ws.commits.Load() >= before+50, ws.String()
		})
		// A restart: the database refuses connections for a while, and
		// every session ends. Half the faults are bare terminations.
		outage := time.Duration(0)
		if i%2 == 0 {
			outage = time.Duration(200+rand.IntN(800)) * time.Millisecond
			db.allow(t, false)
		}
		terminated += db.terminate(t)
		if outage > 0 {
			time.Sleep(outage) // the fault itself: the database stays down this long
			db.allow(t, true)
			down += outage
		}
	}
	// Writes go through again after the last one.
	before := ws.commits.Load()
	waitFor(t, "writes after the restarts", 30*time.Second, func() (bool, string) {
		return ws.commits.Load() >= before+50, ws.String()
	})
	ws.stop()

	f := l.waitDelivered(t, 60*time.Second)
	st, err := outboxState(t.Context(), pool)
	require.NoError(t, err)
	l.report(t, f, 1, dbRestarts, fmt.Sprintf("backends_terminated=%d downtime=%s writer_failures=%d relay_errors=%d",
		terminated, down.Round(time.Millisecond), ws.failures.Load(), relayLog.errors.Load()))

	require.Positive(t, terminated, "backends were terminated")
	require.Positive(t, ws.failures.Load(), "writers saw the restarts: %s", ws)
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.phantom, "delivered but never committed")
	// Outages are shorter than the lease, and outcomes are retried until
	// recorded: no event is claimed again while its first delivery waits
	// to be recorded.
	require.Zero(t, f.duplicates, "duplicates")
	require.Equal(t, f.events, st.total, "no row from a failed or rolled-back transaction: %s", st)
	require.Equal(t, st.total, st.done, "every row DONE, none stuck: %s", st)
	require.Zero(t, st.claimed, "no claim left: %s", st)
}

// databaseSwitch cuts a test database off as a restart of PostgreSQL
// would, without disturbing the other databases of the server.
type databaseSwitch struct {
	admin *pgx.Conn
	name  string
}

// newDatabaseSwitch opens the admin session for the database of url. It is
// on the server's own database (the one testdb creates databases from): a
// database cannot refuse connections while one is made to it.
func newDatabaseSwitch(t *testing.T, url string) *databaseSwitch {
	t.Helper()
	testCfg, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	serverURL := os.Getenv("TEST_DATABASE_URL")
	if serverURL == "" {
		serverURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	admin, err := pgx.Connect(t.Context(), serverURL)
	require.NoError(t, err)
	d := &databaseSwitch{admin: admin, name: testCfg.Database}
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `ALTER DATABASE `+pgx.Identifier{d.name}.Sanitize()+` ALLOW_CONNECTIONS true`)
		_ = admin.Close(context.Background())
	})
	return d
}

// allow makes the database accept connections, or refuse them.
func (d *databaseSwitch) allow(t *testing.T, yes bool) {
	t.Helper()
	_, err := d.admin.Exec(t.Context(), fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, pgx.Identifier{d.name}.Sanitize(), yes))
	require.NoError(t, err)
}

// terminate ends every session of the database and returns how many.
func (d *databaseSwitch) terminate(t *testing.T) int64 {
	t.Helper()
	var n int64
	require.NoError(t, d.admin.QueryRow(t.Context(), `
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
FROM pg_stat_activity WHERE datname = $1`, d.name).Scan(&n))
	return n
}
