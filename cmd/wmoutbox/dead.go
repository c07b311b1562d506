package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
)

var deadCommand = &command{
	name:    "dead",
	summary: "list, show, replay and purge DEAD events",
	sub: []*command{
		{
			name:    "list",
			args:    "[filter flags] [--limit N] [--after ID]",
			summary: "list DEAD events matching the filter, by event id",
			help: `Lists a page of DEAD events matching the filter flags, by event id. When
the page is full, the command to read the next page (--after the last id)
goes to standard error.`,
			setup: func(fs *flag.FlagSet) action {
				var f filterFlags
				f.register(fs)
				limit := fs.Int("limit", 50, "list `N` events a page, at most 10000")
				after := fs.String("after", "", "start after event `ID` (the last of the previous page)")
				return func(ctx context.Context, c *cli, args []string) error {
					if err := noArgs(args); err != nil {
						return err
					}
					if *limit < 1 || *limit > 10000 {
						return usagef("--limit: want 1 to 10000, got %d", *limit)
					}
					return deadList(ctx, c, f.filter(), *limit, *after)
				}
			},
		},
		{
			name:    "show",
			args:    "[--hide-payload] ID",
			summary: "print an event: every column, its headers and payload",
			help: `Prints every column of the event with id ID (DEAD or not), its headers,
and its payload: JSON indented, anything else as a hex dump.`,
			setup: func(fs *flag.FlagSet) action {
				hide := fs.Bool("hide-payload", false, "print the payload's size and not its content, nor header values")
				return func(ctx context.Context, c *cli, args []string) error {
					if len(args) != 1 {
						return usagef("dead show: want one event ID")
					}
					return deadShow(ctx, c, args[0], *hide)
				}
			},
		},
		deadActionCommand(deadReplay),
		deadActionCommand(deadPurge),
	},
}

// deadAction is replay or purge.
type deadAction struct {
	verb, past string // "replay", "replayed"
	summary    string
	run        func(ctx context.Context, s operator, f outbox.DeadFilter) (int64, error)
}

var (
	deadReplay = deadAction{"replay", "replayed", "return DEAD events matching the filter to NEW, due at once",
		func(ctx context.Context, s operator, f outbox.DeadFilter) (int64, error) { return s.ReplayDead(ctx, f) }}
	deadPurge = deadAction{"purge", "purged", "delete DEAD events matching the filter",
		func(ctx context.Context, s operator, f outbox.DeadFilter) (int64, error) { return s.PurgeDead(ctx, f) }}
)

func deadActionCommand(a deadAction) *command {
	return &command{
		name:    a.verb,
		args:    "(filter flags | --all) [--dry-run] [--yes]",
		summary: a.summary,
		help: fmt.Sprintf(`Counts the DEAD events matching the filter flags, says what it will do,
and asks for confirmation on standard input ("%[1]s 12 DEAD events
matching topic=orders? [y/N]"). --yes skips the question; without it, a
standard input that is not a terminal (a script, a pipe, cron) is refused
with exit code 2, so that nothing changes without someone's say. --dry-run
prints the count and a sample of the events and changes nothing.

An empty filter is refused: --all selects every DEAD event (those that died
before now). The command prints how many events it %[2]s.`, a.verb, a.past),
		setup: func(fs *flag.FlagSet) action {
			var f filterFlags
			f.register(fs)
			all := fs.Bool("all", false, "select every DEAD event (that died before now), with no other filter needed")
			dryRun := fs.Bool("dry-run", false, "print the count and a sample of what would change; change nothing")
			yes := fs.Bool("yes", false, "do not ask for confirmation")
			sample := fs.Int("sample", 10, "with --dry-run, list a sample of `N` events")
			return func(ctx context.Context, c *cli, args []string) error {
				if err := noArgs(args); err != nil {
					return err
				}
				if *sample < 0 || *sample > 10000 {
					return usagef("--sample: want 0 to 10000, got %d", *sample)
				}
				filter := f.filter()
				if *all && filter.DiedBefore.IsZero() {
					filter.DiedBefore = time.Now()
				}
				if emptyFilter(filter) {
					return usagef("dead %s: no filter: give --topic, --type, --group, --id, ... or --all for every DEAD event", a.verb)
				}
				return deadAct(ctx, c, a, filter, *dryRun, *yes, *sample)
			}
		},
	}
}

// eventJSON is an event in JSON output.
type eventJSON struct {
	ID            string            `json:"id"`
	Type          string            `json:"type"`
	Topic         string            `json:"topic"`
	Status        string            `json:"status"`
	Attempts      int               `json:"attempts"`
	AggregateType string            `json:"aggregate_type,omitempty"`
	AggregateID   string            `json:"aggregate_id,omitempty"`
	TenantID      string            `json:"tenant_id,omitempty"`
	OccurredAt    *time.Time        `json:"occurred_at,omitempty"`
	CreatedAt     *time.Time        `json:"created_at,omitempty"`
	UpdatedAt     *time.Time        `json:"updated_at,omitempty"`
	AvailableAt   *time.Time        `json:"available_at,omitempty"`
	DoneAt        *time.Time        `json:"done_at,omitempty"`
	LockedBy      string            `json:"locked_by,omitempty"`
	LockedAt      *time.Time        `json:"locked_at,omitempty"`
	LockedUntil   *time.Time        `json:"locked_until,omitempty"`
	LastError     string            `json:"last_error,omitempty"`
	ErrorGroup    string            `json:"error_group,omitempty"`
	Malformed     string            `json:"malformed,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	PayloadSize   int               `json:"payload_size"`
	// Payload is the payload when it is JSON (and shown); PayloadBytes
	// otherwise (base64 in JSON).
	Payload      json.RawMessage `json:"payload,omitempty"`
	PayloadBytes []byte          `json:"payload_bytes,omitempty"`
}

// payloadOf returns an event's payload, and whether it is JSON.
func payloadOf(e *outbox.Event) ([]byte, bool) {
	if e.PayloadJSON != nil {
		return e.PayloadJSON, json.Valid(e.PayloadJSON)
	}
	return e.PayloadBytes, len(e.PayloadBytes) > 0 && json.Valid(e.PayloadBytes)
}

func toJSON(e *outbox.Event, withPayload bool) eventJSON {
	j := eventJSON{
		ID: e.ID, Type: string(e.Type), Topic: e.Topic, Status: e.Status.String(), Attempts: e.Attempts,
		AggregateType: string(e.AggregateType), AggregateID: e.AggregateID, TenantID: e.TenantID,
		OccurredAt: optionalTime(e.OccurredAt), CreatedAt: optionalTime(e.CreatedAt), UpdatedAt: optionalTime(e.UpdatedAt),
		AvailableAt: optionalTime(e.AvailableAt), DoneAt: optionalTime(e.DoneAt),
		LockedBy: e.LockedBy, LockedAt: optionalTime(e.LockedAt), LockedUntil: optionalTime(e.LockedUntil),
		LastError: e.LastError, ErrorGroup: e.ErrorGroup,
	}
	if e.Malformed != nil {
		j.Malformed = e.Malformed.Error()
	}
	payload, isJSON := payloadOf(e)
	j.PayloadSize = len(payload)
	if !withPayload {
		if len(e.Headers) > 0 {
			j.Headers = make(map[string]string, len(e.Headers))
			for k := range e.Headers {
				j.Headers[k] = ""
			}
		}
		return j
	}
	j.Headers = e.Headers
	if isJSON {
		j.Payload = json.RawMessage(payload)
	} else if len(payload) > 0 {
		j.PayloadBytes = payload
	}
	return j
}

func deadList(ctx context.Context, c *cli, f outbox.DeadFilter, limit int, after string) error {
	d, s, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	events, err := s.QueryDead(ctx, outbox.DeadQuery{DeadFilter: f, After: after, Limit: limit})
	if err != nil {
		return err
	}
	next := ""
	if len(events) == limit {
		next = events[len(events)-1].ID
	}
	if c.globals.json {
		return c.writeJSON(pageJSON(events, next))
	}
	if len(events) == 0 {
		c.printf("No DEAD events match %s.\n", describeFilter(f))
		return nil
	}
	if err := c.writeEvents(events); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(c.stderr, "More may follow: add --after %s for the next page.\n", next)
	}
	return nil
}

// eventPageJSON is a page of events in JSON output, without their
// payloads.
type eventPageJSON struct {
	Events []eventJSON `json:"events"`
	// Next is the flag that reads the next page (--after of dead list,
	// --before of events), "" on the last.
	Next string `json:"next,omitempty"`
}

func pageJSON(events []outbox.Event, next string) eventPageJSON {
	p := eventPageJSON{Events: make([]eventJSON, len(events)), Next: next}
	for i := range events {
		p.Events[i] = toJSON(&events[i], false)
	}
	return p
}

// writeEvents writes DEAD events as a table.
func (c *cli) writeEvents(events []outbox.Event) error {
	rows := make([][]string, 0, len(events))
	for _, e := range events {
		aggregate := "-"
		if e.AggregateType != "" || e.AggregateID != "" {
			aggregate = string(e.AggregateType) + "/" + e.AggregateID
		}
		group := e.ErrorGroup
		if group == "" {
			group = outbox.UngroupedDead
		}
		rows = append(rows, []string{e.ID, e.Topic, string(e.Type), aggregate, timestamp(e.UpdatedAt),
			fmt.Sprint(e.Attempts), group, clip(e.LastError, 60)})
	}
	return c.writeTable([]string{"ID", "TOPIC", "TYPE", "AGGREGATE", "DIED", "ATTEMPTS", "GROUP", "ERROR"}, rows)
}

func deadShow(ctx context.Context, c *cli, id string, hide bool) error {
	d, s, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	e, err := s.Get(ctx, id)
	if errors.Is(err, outbox.ErrNotFound) {
		return fmt.Errorf("no event %s in %s", id, d.qualifiedTable())
	}
	if err != nil {
		return err
	}
	if c.globals.json {
		return c.writeJSON(toJSON(&e, !hide))
	}
	tw := newTabWriter(c.stdout)
	field := func(name, value string) {
		if value == "" {
			value = "-"
		}
		fmt.Fprintf(tw, "%s:\t%s\n", name, value)
	}
	field("ID", e.ID)
	field("Type", string(e.Type))
	field("Topic", e.Topic)
	field("Status", e.Status.String())
	field("Attempts", fmt.Sprint(e.Attempts))
	field("Aggregate type", string(e.AggregateType))
	field("Aggregate ID", e.AggregateID)
	field("Tenant ID", e.TenantID)
	field("Occurred at", timestamp(e.OccurredAt))
	field("Created at", timestamp(e.CreatedAt))
	field("Updated at", timestamp(e.UpdatedAt))
	field("Available at", timestamp(e.AvailableAt))
	field("Done at", timestamp(e.DoneAt))
	field("Locked by", e.LockedBy)
	field("Locked at", timestamp(e.LockedAt))
	field("Locked until", timestamp(e.LockedUntil))
	field("Error group", e.ErrorGroup)
	field("Last error", e.LastError)
	if e.Malformed != nil {
		field("Malformed", e.Malformed.Error())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	c.printf("\nHeaders:\n")
	if len(e.Headers) == 0 {
		c.printf("  (none)\n")
	}
	for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
		if hide {
			c.printf("  %s: (hidden, %d bytes)\n", k, len(e.Headers[k]))
			continue
		}
		c.printf("  %s: %s\n", k, e.Headers[k])
	}
	payload, isJSON := payloadOf(&e)
	switch {
	case len(payload) == 0:
		c.printf("\nPayload: (empty)\n")
	case hide:
		c.printf("\nPayload: (hidden, %d bytes)\n", len(payload))
	case isJSON:
		var b bytes.Buffer
		if err := json.Indent(&b, payload, "", "  "); err != nil {
			return err
		}
		c.printf("\nPayload (JSON, %d bytes):\n%s\n", len(payload), b.String())
	default:
		c.printf("\nPayload (%d bytes):\n%s", len(payload), hex.Dump(payload))
	}
	return nil
}

func deadAct(ctx context.Context, c *cli, a deadAction, f outbox.DeadFilter, dryRun, yes bool, sample int) error {
	d, s, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	matched, err := s.CountDead(ctx, f)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("%s %d DEAD event%s matching %s", a.verb, matched, plural(int(matched)), describeFilter(f))
	if dryRun {
		var events []outbox.Event
		if sample > 0 && matched > 0 {
			if events, err = s.QueryDead(ctx, outbox.DeadQuery{DeadFilter: f, Limit: sample}); err != nil {
				return err
			}
		}
		if c.globals.json {
			list := make([]eventJSON, len(events))
			for i := range events {
				list[i] = toJSON(&events[i], false)
			}
			return c.writeJSON(struct {
				DryRun  bool        `json:"dry_run"`
				Action  string      `json:"action"`
				Matched int64       `json:"matched"`
				Sample  []eventJSON `json:"sample"`
			}{true, a.verb, matched, list})
		}
		c.printf("Dry run: would %s; nothing changed.\n", what)
		if len(events) > 0 {
			c.printf("\n")
			if err := c.writeEvents(events); err != nil {
				return err
			}
			if int64(len(events)) < matched {
				c.printf("... and %d more.\n", matched-int64(len(events)))
			}
		}
		return nil
	}
	if matched == 0 {
		return c.reportChanged(a, 0, 0, f)
	}
	if !yes {
		if !c.terminal() {
			return usagef("%s: standard input is not a terminal to confirm on: add --yes (or --dry-run to look first)", what)
		}
		fmt.Fprintf(c.stderr, "%s? [y/N] ", what)
		answer, err := bufio.NewReader(c.stdin).ReadString('\n')
		if err != nil && answer == "" {
			return fmt.Errorf("no answer, nothing %s: %w", a.past, err)
		}
		if answer = strings.ToLower(strings.TrimSpace(answer)); answer != "y" && answer != "yes" {
			return errors.New("not confirmed: nothing " + a.past)
		}
	}
	n, err := a.run(ctx, s, f)
	if err != nil {
		if n > 0 {
			fmt.Fprintf(c.stderr, "wmoutbox: %s %d DEAD events before the error\n", a.past, n)
		}
		return err
	}
	return c.reportChanged(a, matched, n, f)
}

func (c *cli) reportChanged(a deadAction, matched, n int64, f outbox.DeadFilter) error {
	if c.globals.json {
		return c.writeJSON(map[string]any{"action": a.verb, "matched": matched, a.past: n})
	}
	c.printf("%s %d DEAD event%s matching %s.\n", strings.ToUpper(a.past[:1])+a.past[1:], n, plural(int(n)), describeFilter(f))
	return nil
}
