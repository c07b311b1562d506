package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// database is the program's own database on the server, dropped at the
// end.
type database struct {
	server string // URL of the server's maintenance database
	name   string
	url    string
	// logical says the server can serve a log relay (see logUnavailable):
	// the log relay's rows run only then.
	logical bool
}

func createDatabase(ctx context.Context, server string) (*database, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	db := &database{server: server, name: "wmoutbox_bench_" + hex.EncodeToString(b[:])}
	u, err := url.Parse(server)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	u.Path = "/" + db.name
	// Every connection of the program, its relay process's included, names
	// itself after the database, so that othersWatch can tell it from
	// other clients'.
	q := u.Query()
	q.Set("application_name", db.name)
	u.RawQuery = q.Encode()
	db.url = u.String()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", u.Redacted(), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db.name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	return db, nil
}

// drop drops the database, and first the replication slots of its log
// relays that a scenario left behind (the database could not be dropped
// with them), which it reports as an error: every scenario drops its own.
func (db *database) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.server)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var slots []string
	rows, err := conn.Query(ctx, "SELECT slot_name FROM pg_replication_slots WHERE database = $1", db.name)
	if err == nil {
		slots, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err == nil && len(slots) > 0 {
		err = fmt.Errorf("replication slots left behind, dropped now: %v", slots)
		if dropErr := dropSlots(ctx, conn, "database = $1", db.name); dropErr != nil {
			err = fmt.Errorf("replication slots left behind: %v: %w", slots, dropErr)
		}
	}
	_, dropErr := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.name}.Sanitize()+" WITH (FORCE)")
	return errors.Join(err, dropErr)
}

// pool opens a connection pool on the database, large enough for four
// writers and a relay, with the connections they use already dialled, so
// that no timed window pays for dialling them.
func (db *database) pool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(db.url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	conns := make([]*pgxpool.Conn, 0, warmConns)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range warmConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("open connections: %w", err)
		}
		conns = append(conns, c)
	}
	return pool, nil
}

// warmConns is how many connections a pool opens at once: four writers
// and a relay's claims, outcomes and listener.
const warmConns = 8

// freshTable creates an outbox table of its own for one repetition, so
// that no repetition inherits another's dead rows.
func freshTable(ctx context.Context, pool *pgxpool.Pool, prefix string) (postgres.Config, func(), error) {
	var b [4]byte
	_, _ = rand.Read(b[:])
	cfg := postgres.Config{Table: prefix + "_" + hex.EncodeToString(b[:])}
	if err := postgres.Migrate(ctx, pool, cfg); err != nil {
		return cfg, nil, fmt.Errorf("migrate %s: %w", cfg.Table, err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{cfg.Table}.Sanitize())
	}
	return cfg, drop, nil
}

// analyze gives the planner the statistics autovacuum would gather a
// minute later, so that a freshly filled backlog is claimed with the plan
// a long-running system would use.
func analyze(ctx context.Context, pool *pgxpool.Pool, table string) error {
	_, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{table}.Sanitize())
	return err
}
