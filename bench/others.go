package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The forwarder reads only rows of transactions older than the server's
// oldest running one (pg_snapshot_xmin), so a transaction another client
// holds open, in any database of the server, stalls it; and WAL per event
// counts what every session on the server writes. The program watches the
// server's other sessions for the whole run and says after the table
// whether any held a transaction open.

// othersInterval is how often the watch looks: a query on
// pg_stat_activity, a fraction of a millisecond of server time.
const othersInterval = 250 * time.Millisecond

// othersQuery lists the client sessions that hold a transaction id or a
// snapshot, other than this session and the program's own, whose
// connections carry the program's database name as application_name. A
// session of another user shows none of this without pg_read_all_stats.
const othersQuery = `SELECT pid, coalesce(datname, ''), coalesce(extract(epoch FROM now() - xact_start), 0)::float8
	FROM pg_stat_activity
	WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
	  AND application_name IS DISTINCT FROM $1
	  AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL)`

// otherTx is a session of another client seen holding a transaction open.
type otherTx struct {
	database string
	age      time.Duration // the longest seen
}

// othersWatch samples othersQuery every othersInterval until stopped.
type othersWatch struct {
	pool *pgxpool.Pool
	self string // the program's application_name

	mu   sync.Mutex
	seen map[int32]otherTx // by process id
	err  error             // the first failed look, which ends the watch

	cancel context.CancelFunc
	done   chan struct{}
}

func watchOthers(ctx context.Context, pool *pgxpool.Pool, self string) *othersWatch {
	ctx, cancel := context.WithCancel(ctx)
	o := &othersWatch{pool: pool, self: self, seen: map[int32]otherTx{}, cancel: cancel, done: make(chan struct{})}
	go o.run(ctx)
	return o
}

func (o *othersWatch) run(ctx context.Context) {
	defer close(o.done)
	tick := time.NewTicker(othersInterval)
	defer tick.Stop()
	for {
		if err := o.look(ctx); err != nil {
			if ctx.Err() == nil {
				o.mu.Lock()
				o.err = err
				o.mu.Unlock()
			}
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// look records the other sessions holding a transaction open now.
func (o *othersWatch) look(ctx context.Context) error {
	rows, err := o.pool.Query(ctx, othersQuery, o.self)
	if err != nil {
		return fmt.Errorf("pg_stat_activity: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			pid      int32
			database string
			seconds  float64
		)
		if err := rows.Scan(&pid, &database, &seconds); err != nil {
			return fmt.Errorf("pg_stat_activity: %w", err)
		}
		o.note(pid, otherTx{database: database, age: time.Duration(seconds * float64(time.Second))})
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pg_stat_activity: %w", err)
	}
	return nil
}

func (o *othersWatch) note(pid int32, tx otherTx) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if tx.age >= o.seen[pid].age {
		o.seen[pid] = tx
	}
}

// stop ends the watch and returns the line to print after the table.
func (o *othersWatch) stop() string {
	o.cancel()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	return othersLine(o.seen, o.err)
}

// othersLine says whether other sessions held a transaction open, how
// many, and the longest.
func othersLine(seen map[int32]otherTx, err error) string {
	if err != nil {
		return fmt.Sprintf("other transactions on the server: not watched to the end of the run (%v); "+
			"the forwarder's figures, and WAL per event, assume there were none", err)
	}
	if len(seen) == 0 {
		return "other transactions on the server: none seen during the run"
	}
	var (
		pid     int32
		longest otherTx
	)
	for p, tx := range seen {
		if pid == 0 || tx.age > longest.age {
			pid, longest = p, tx
		}
	}
	return fmt.Sprintf("WARNING: %d session(s) of other clients held a transaction open on the server during the run, "+
		"the longest for at least %.1f s (pid %d, database %q); the forwarder reads no row of a transaction newer "+
		"than the oldest open one, and WAL per event counts every session's: neither figure is to be trusted",
		len(seen), longest.age.Seconds(), pid, longest.database)
}
