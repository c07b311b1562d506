package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
)

var purgeCommand = &command{
	name:    "purge",
	args:    "--done-older-than DURATION [--dead-older-than DURATION] [--batch-size N]",
	summary: "delete DONE and DEAD events older than a retention, in batches",
	help: `Deletes the DONE events last updated longer ago than --done-older-than,
and the DEAD events that died longer ago than --dead-older-than, with
Store.Purge: in batches of --batch-size rows, each its own transaction, so
that a large purge holds no long lock. One of the two flags is required.
Progress goes to standard error after each batch, the totals to standard
output (--json: an object). Durations take days (7d, 1d12h) as well as Go
durations (36h, 90m).`,
	setup: func(fs *flag.FlagSet) action {
		var done, dead durationFlag
		fs.Var(&done, "done-older-than", "delete DONE events older than `DURATION` (7d, 36h)")
		fs.Var(&dead, "dead-older-than", "delete DEAD events older than `DURATION` (30d)")
		batch := fs.Int("batch-size", 1000, "delete `N` rows per transaction, at most 100000")
		return func(ctx context.Context, c *cli, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if done.d == 0 && dead.d == 0 {
				return usagef("purge: give --done-older-than, --dead-older-than or both")
			}
			if *batch < 1 || *batch > 100000 {
				return usagef("--batch-size: want 1 to 100000, got %d", *batch)
			}
			return purge(ctx, c, done.d, dead.d, *batch)
		}
	},
}

func purge(ctx context.Context, c *cli, doneAge, deadAge time.Duration, batch int) error {
	d, s, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	var totals struct {
		Done *int64 `json:"done,omitempty"`
		Dead *int64 `json:"dead,omitempty"`
	}
	step := func(status outbox.Status, olderThan time.Duration) (*int64, error) {
		label := fmt.Sprintf("%s events older than %s", status, formatDuration(olderThan))
		n, err := s.Purge(ctx, outbox.PurgeRequest{
			OlderThan: olderThan, BatchSize: batch, Statuses: []outbox.Status{status},
			Progress: func(deleted int64) {
				fmt.Fprintf(c.stderr, "purge %s: %d deleted\n", label, deleted)
			},
		})
		if err != nil {
			return nil, fmt.Errorf("purge %s (%d deleted): %w", label, n, err)
		}
		if !c.globals.json {
			c.printf("Purged %d %s.\n", n, label)
		}
		return &n, nil
	}
	if doneAge > 0 {
		if totals.Done, err = step(outbox.StatusDone, doneAge); err != nil {
			return err
		}
	}
	if deadAge > 0 {
		if totals.Dead, err = step(outbox.StatusDead, deadAge); err != nil {
			return err
		}
	}
	if c.globals.json {
		return c.writeJSON(totals)
	}
	return nil
}
