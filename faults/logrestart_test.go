//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/testenv"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// The server restart scenarios restart the machine's PostgreSQL, which
// every test of the suite uses: they are not parallel, so that they run
// before the parallel tests are released, with the server to themselves.

// TestLogRelayServerRestart restarts PostgreSQL (pg_ctlcluster restart, a
// fast shutdown) while writers write and a relay in log mode delivers.
// Writers retry; the relay reconnects to the slot, which the shutdown's
// checkpoint saved, and goes on. Every committed event is delivered; the
// figure to read is the time from the restart until delivery resumed.
func TestLogRelayServerRestart(t *testing.T) {
	testLogRelayServerRestart(t, "log-server-restart", "restart")
}

// TestLogRelayServerCrash is TestLogRelayServerRestart with a crash: the
// server stops in immediate mode (no checkpoint, as in a power cut) and
// starts again, recovering from its WAL. The relay records outcomes with
// synchronous_commit off, so DONEs committed in the last moments before
// the crash may be gone: their events are pending again, and are
// delivered again (from the slot, or claimed once covered), which the
// figures count.
func TestLogRelayServerCrash(t *testing.T) {
	testLogRelayServerRestart(t, "log-server-crash", "crash")
}

// restartWait bounds how long pg_ctl waits for the server to stop or
// start: a server that does not stop within it fails the test rather
// than the suite's timeout.
const restartWait = "30"

func testLogRelayServerRestart(t *testing.T, scenario, how string) {
	cluster := localCluster(t)
	lt := newLogRelayTest(t, scenario)
	// After the relay is gone (a server whose shutdown waits for it then
	// stops), and before the slot is dropped: never leave the server that
	// every test uses down.
	t.Cleanup(func() { cluster.ensureRunning(t) })
	relay, ws := lt.startUnderLoad(t, scenario+"-relay")
	lt.waitDeliveries(t, 500, func() string { return fmt.Sprintf("writers %s; %s", ws, relay.output()) })

	// One clock: the database's clock_timestamp() that stamps the ledger
	// is this machine's.
	began := time.Now()
	if how == "crash" {
		require.NoError(t, cluster.ctl("stop", "-m", "immediate", "--", "-t", restartWait))
		require.NoError(t, cluster.ctl("start", "--", "-t", restartWait))
	} else {
		require.NoError(t, cluster.ctl("restart", "--", "-t", restartWait), "the server did not restart (a fast shutdown waits "+
			"for every logical replication client to confirm what it was sent); relay:\n%s", relay.out)
	}
	up := time.Now()
	lt.pool.Reset() // its connections ended with the server
	first := lt.waitDeliveryAfter(t, "", up, 60*time.Second, func() string {
		return fmt.Sprintf("writers %s; %s", ws, relay.output())
	})
	resumed := first.Sub(began)

	before := ws.commits.Load()
	waitFor(t, "writes after the restart", 30*time.Second, func() (bool, string) {
		return ws.commits.Load() >= before+50, ws.String()
	})
	stopping := time.Now()
	ws.stop()
	writersStop := time.Since(stopping)

	f := lt.l.waitDelivered(t, 60*time.Second)
	settled := time.Since(began)
	relay.stop(t)
	// Caught up: every event committed before the server was back
	// delivered.
	_, last, err := lt.committedBetween(t.Context(), time.Time{}, up)
	require.NoError(t, err)
	require.NotNil(t, last)
	caughtUp := last.Sub(began)
	// Delivered before the server was back and again after: streamed
	// again (not confirmed when the server stopped), or claimed (a DONE
	// the crash took back, behind the slot's confirmed position).
	var again, claimed int
	require.NoError(t, lt.pool.QueryRow(t.Context(), `
SELECT count(DISTINCT event_id), count(DISTINCT event_id) FILTER (WHERE source <> $2)
FROM fault_delivered d
WHERE at >= $1 AND EXISTS (SELECT 1 FROM fault_delivered e WHERE e.event_id = d.event_id AND e.at < $1)`,
		up, watermilladapter.SourceLog).Scan(&again, &claimed))
	st, err := outboxState(t.Context(), lt.pool)
	require.NoError(t, err)

	t.Logf("log relay, server %s: delivery resumed %.1f s after it began (server up after %.1f s), caught up after %.1f s, "+
		"table settled after %.1f s; %d events delivered before it was back and again after, %d of them claimed",
		how, resumed.Seconds(), up.Sub(began).Seconds(), caughtUp.Seconds(), settled.Seconds(), again, claimed)
	lt.l.report(t, f, 1, 1, fmt.Sprintf("server_down=%s resumed=%s caught_up=%s settled=%s delivered_again=%d delivered_again_claimed=%d",
		up.Sub(began).Round(10*time.Millisecond), resumed.Round(10*time.Millisecond), caughtUp.Round(10*time.Millisecond),
		settled.Round(10*time.Millisecond), again, claimed),
		fmt.Sprintf("writer_failures=%d writers_stop=%s", ws.failures.Load(), writersStop.Round(10*time.Millisecond)))

	require.Positive(t, ws.failures.Load(), "writers saw the restart: %s", ws)
	require.Zero(t, f.lost, "lost")
	require.Zero(t, f.phantom, "delivered but never committed")
	require.Equal(t, f.events, st.total, "no row from a failed or rolled-back transaction: %s", st)
	require.Equal(t, st.total, st.done, "every row DONE, none stuck: %s", st)
	require.Zero(t, st.claimed, "no claim left: %s", st)
}

// postgresCluster is the machine's PostgreSQL cluster that the tests' server
// is, as Debian's postgresql-common (pg_lsclusters, pg_ctlcluster) knows
// it.
type postgresCluster struct {
	version, name string
	url           string // of the server's own database
	sudo          bool   // pg_ctlcluster runs as root or the cluster's owner
}

// localCluster finds the cluster listening on the tests' server's port.
// Without one (a server elsewhere, no postgresql-common) the test skips,
// or fails on CI, whose setup has one.
func localCluster(t *testing.T) postgresCluster {
	t.Helper()
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	cfg, err := pgconn.ParseConfig(url)
	require.NoError(t, err)
	if ip := net.ParseIP(cfg.Host); cfg.Host != "localhost" && !strings.HasPrefix(cfg.Host, "/") && (ip == nil || !ip.IsLoopback()) {
		testenv.SkipOrFail(t, "the server at %s is not this machine's: it cannot be restarted here", cfg.Host)
	}
	if _, err := exec.LookPath("pg_ctlcluster"); err != nil {
		testenv.SkipOrFail(t, "restarting PostgreSQL needs pg_ctlcluster (Debian's postgresql-common): %v", err)
	}
	out, err := exec.Command("pg_lsclusters", "-h").Output()
	require.NoError(t, err, "pg_lsclusters")
	scanner := bufio.NewScanner(bytes.NewReader(out))
	for scanner.Scan() {
		// version cluster port status owner data-directory log-file
		fields := strings.Fields(scanner.Text())
		if len(fields) < 5 || fields[2] != fmt.Sprint(cfg.Port) {
			continue
		}
		c := postgresCluster{version: fields[0], name: fields[1], url: url}
		if me, err := user.Current(); err == nil && me.Uid != "0" && me.Username != fields[4] {
			c.sudo = true
		}
		return c
	}
	testenv.SkipOrFail(t, "no cluster of this machine listens on port %d (pg_lsclusters)", cfg.Port)
	return postgresCluster{}
}

// ctl runs pg_ctlcluster on the cluster: action and its options.
func (c postgresCluster) ctl(action string, options ...string) error {
	// Where systemd runs, pg_ctlcluster would hand the action to
	// systemctl; the unit's state does not matter to a test.
	args := append([]string{"pg_ctlcluster", "--skip-systemctl-redirect", c.version, c.name, action}, options...)
	if c.sudo {
		args = append([]string{"sudo", "-n"}, args...)
	}
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// ensureRunning waits until the cluster runs, starting it when it is
// down: after a failed restart it may still be stopping, and then stop.
func (c postgresCluster) ensureRunning(t *testing.T) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		status, err := c.status()
		switch {
		case err != nil:
			t.Errorf("cluster %s/%s: %v", c.version, c.name, err)
			return
		case status == "down":
			if err := c.ctl("start"); err != nil {
				t.Errorf("cluster %s/%s was left down, and did not start: %v", c.version, c.name, err)
			}
			return
		case status == "online" && c.accepts():
			return
		}
		time.Sleep(200 * time.Millisecond) // polling the server's state
	}
	t.Errorf("cluster %s/%s neither runs nor is down after a minute", c.version, c.name)
}

// status is pg_lsclusters' word for the cluster: online (which includes
// stopping) or down.
func (c postgresCluster) status() (string, error) {
	out, err := exec.Command("pg_lsclusters", "-h", c.version, c.name).Output()
	if err != nil {
		return "", fmt.Errorf("pg_lsclusters: %w", err)
	}
	fields := strings.Fields(string(out))
	if len(fields) < 4 {
		return "", fmt.Errorf("pg_lsclusters printed %q", out)
	}
	return fields[3], nil
}

// accepts reports whether the server takes connections (not while it
// stops).
func (c postgresCluster) accepts() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, c.url)
	if err != nil {
		return false
	}
	_ = conn.Close(ctx)
	return true
}
