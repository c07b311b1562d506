//go:build faults

package faults

import (
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/syncbuf"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

const crashKills = 20

// settlerBacklog is the most outcomes a relay can hold unrecorded: the
// settler's queue and the batch it is writing (watermilladapter's
// maxSettleBatch, 500, each).
const settlerBacklog = 2 * 500

// TestCrashedRelayProcess kills a relay process with SIGKILL 20 times in
// the middle of its work while writers keep writing; a second relay
// process runs throughout and takes the dead one's claims over when their
// leases end. Every committed event is delivered; duplicates are only
// events the killed relay held (claimed, delivered or not, outcome not
// recorded) when it died.
func TestCrashedRelayProcess(t *testing.T) {
	t.Parallel()
	url := testdb.URL(t)
	pool := openPool(t, url, 6)
	l := newLedger(t, pool, "crash")
	store, err := postgres.NewStore(pool, postgres.Config{})
	require.NoError(t, err)
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	require.NoError(t, err)

	ws := startWriters(t, l, writerConfig{
		writers: 2, batch: 5, randomBatch: true, pause: 3 * time.Millisecond, rollbackEvery: 10,
		write: writeWithWriter(store, writer, crashTopic),
	})
	survivor := startRelayProcess(t, url, "crash-survivor")

	// In flight at each kill: the victim's claims whose outcome it had not
	// recorded. Each is delivered again (at most once more per kill).
	inFlight := make([]int64, 0, crashKills)
	for kill := 1; kill <= crashKills; kill++ {
		owner := fmt.Sprintf("crash-victim-%02d", kill)
		victim := startRelayProcess(t, url, owner)
		// Mid-batch: after a random number of deliveries, while it keeps
		// claiming and delivering.
		target := 1 + rand.IntN(150)
		waitFor(t, owner+" delivering", 30*time.Second, func() (bool, string) {
			var n int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM fault_delivered WHERE by_relay = $1`, owner).Scan(&n); err != nil {
				return false, err.Error()
			}
			return n >= target, fmt.Sprintf("%d of %d deliveries; writers %s; %s", n, target, ws, victim.output())
		})
		victim.kill(t)
		var held int64
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT count(*) FROM outbox_event WHERE locked_by = $1 AND status IN (0, 2)`, owner).Scan(&held))
		inFlight = append(inFlight, held)
	}
	ws.stop()

	// The survivor alone now delivers what is left, the dead victims'
	// claims included once their leases end.
	f := l.waitDelivered(t, 60*time.Second)
	survivor.stop(t)

	st, err := outboxState(t.Context(), pool)
	require.NoError(t, err)
	var bound int64
	for i, held := range inFlight {
		require.LessOrEqual(t, held, int64(crashWorkers+crashColdQueue+settlerBacklog),
			"kill %d: a relay never holds more than workers + cold queue + settler backlog", i+1)
		bound += held
	}
	var survivorDelivered int64
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(DISTINCT event_id) FROM fault_delivered WHERE by_relay = 'crash-survivor'`).Scan(&survivorDelivered))
	l.report(t, f, 1, crashKills, fmt.Sprintf("in_flight_at_kills=%d survivor_deliveries=%d", bound, survivorDelivered),
		fmt.Sprintf("writer_failures=%d", ws.failures.Load()))

	requireRecoveredFromKills(t, f, st, bound, inFlight)
}

// relayProcess is a relay running as a child process (see TestMain).
type relayProcess struct {
	owner string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *syncbuf.Buffer
	done  chan struct{}
	err   error // of Wait, once done is closed
}

// startRelayProcess starts a relay process named owner on url; env adds
// variables (envScenario) to its environment.
func startRelayProcess(t *testing.T, url, owner string, env ...string) *relayProcess {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envRole+"="+roleRelay, envDatabase+"="+url, envOwner+"="+owner)
	cmd.Env = append(cmd.Env, env...)
	out := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &relayProcess{owner: owner, cmd: cmd, stdin: stdin, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		// A test that failed half way leaves no process behind.
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *relayProcess) kill(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		t.Fatalf("relay %s exited before it was killed: %v\n%s", p.owner, p.err, p.out)
	default:
	}
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done
}

// stop closes the relay's input, which makes it close gracefully, and
// requires a clean exit.
func (p *relayProcess) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.stdin.Close())
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("relay %s did not stop within 30s\n%s", p.owner, p.out)
	}
	require.NoError(t, p.err, "relay %s exit\n%s", p.owner, p.out)
}

func (p *relayProcess) output() string {
	select {
	case <-p.done:
		return fmt.Sprintf("relay %s exited: %v\n%s", p.owner, p.err, p.out)
	default:
		return "relay " + p.owner + " running"
	}
}
