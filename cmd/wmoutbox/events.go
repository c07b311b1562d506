package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"

	"github.com/wmoutbox/wmoutbox/outbox"
)

var eventsCommand = &command{
	name:    "events",
	args:    "--aggregate-id ID [--aggregate-type TYPE] [--topic TOPIC] [--limit N] [--before CURSOR]",
	summary: "list one aggregate's events, every status, newest first",
	help: `Lists a page of the events of one aggregate (--aggregate-type, default
__GLOBAL__ as in an envelope, and --aggregate-id), whatever their status,
newest first, with Store.AggregateEvents, which reads the aggregate index of
migration 6 (4 on MySQL). When another page follows, the command to read it
(--before the page's cursor) goes to standard error; with --json, the
cursor is the object's "next".`,
	setup: func(fs *flag.FlagSet) action {
		aggType := fs.String("aggregate-type", "", "the aggregate's `TYPE` (default __GLOBAL__)")
		aggID := fs.String("aggregate-id", "", "the aggregate's `ID` (required)")
		topic := fs.String("topic", "", "only the events of `TOPIC`")
		limit := fs.Int("limit", 50, "list `N` events a page, at most 10000")
		before := fs.String("before", "", "start after `CURSOR`, where the previous page ended")
		return func(ctx context.Context, c *cli, args []string) error {
			if err := noArgs(args); err != nil {
				return err
			}
			if *aggID == "" {
				return usagef("events: --aggregate-id is required")
			}
			if *limit < 1 || *limit > 10000 {
				return usagef("--limit: want 1 to 10000, got %d", *limit)
			}
			cursor, err := outbox.ParseAggregateCursor(*before)
			if err != nil {
				return usagef("--before: %v", err)
			}
			return aggregateEvents(ctx, c, outbox.AggregateQuery{
				Type: outbox.AggregateType(*aggType), ID: *aggID, Topic: *topic, Before: cursor, Limit: *limit,
			})
		}
	},
}

func aggregateEvents(ctx context.Context, c *cli, q outbox.AggregateQuery) error {
	d, s, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	page, err := s.AggregateEvents(ctx, q)
	if err != nil {
		return err
	}
	if c.globals.json {
		return c.writeJSON(pageJSON(page.Events, page.Next.String()))
	}
	if len(page.Events) == 0 {
		c.printf("No events of aggregate %s/%s.\n", cmp.Or(q.Type, outbox.GlobalAggregate), q.ID)
		return nil
	}
	rows := make([][]string, 0, len(page.Events))
	for _, e := range page.Events {
		rows = append(rows, []string{e.ID, e.Status.String(), e.Topic, string(e.Type), timestamp(e.CreatedAt),
			fmt.Sprint(e.Attempts), clip(e.LastError, 60)})
	}
	if err := c.writeTable([]string{"ID", "STATUS", "TOPIC", "TYPE", "CREATED", "ATTEMPTS", "ERROR"}, rows); err != nil {
		return err
	}
	if !page.Next.IsZero() {
		fmt.Fprintf(c.stderr, "More follow: add --before %s for the next page.\n", page.Next)
	}
	return nil
}
