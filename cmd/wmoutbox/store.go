package main

import (
	"context"
	"fmt"
	"time"

	"github.com/wmoutbox/wmoutbox/admin"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

// operator is the operator API of a store of any dialect: what the admin
// page needs, and Purge.
type operator interface {
	admin.Store
	Purge(ctx context.Context, req outbox.PurgeRequest) (int64, error)
}

var (
	_ operator = (*postgres.Store)(nil)
	_ operator = (*mysql.Store)(nil)
	_ operator = (*sqlite.Store)(nil)
)

// store returns the store on the database's outbox table.
func (d *database) store() (operator, error) {
	var (
		s   operator
		err error
	)
	switch d.dialect {
	case dialectPostgres:
		s, err = postgres.NewStore(d.pool, d.postgres)
	case dialectMySQL:
		s, err = mysql.NewStore(d.db, d.mysql)
	default:
		s, err = sqlite.NewStore(d.db, d.sqlite)
	}
	if err != nil {
		return nil, fmt.Errorf("open the %s store: %w", d.dialect, err)
	}
	return s, nil
}

// ping checks that the database answers.
func (d *database) ping(ctx context.Context) error {
	if d.pool != nil {
		return d.pool.Ping(ctx)
	}
	return d.db.PingContext(ctx)
}

// openStore opens the migrated database of the global flags and its
// store; close the database when done.
func (c *cli) openStore(ctx context.Context) (*database, operator, error) {
	d, err := c.openMigrated(ctx)
	if err != nil {
		return nil, nil, err
	}
	s, err := d.store()
	if err != nil {
		d.close()
		return nil, nil, err
	}
	return d, s, nil
}

// age is how long before now t was, rounded to the second; "-" for a zero
// t.
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String()
}

// timestamp writes t in RFC 3339, UTC; "-" for a zero t.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// optionalTime is t for JSON, nil (null) when zero.
func optionalTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
