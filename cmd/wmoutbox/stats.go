package main

import (
	"cmp"
	"context"
	"flag"
	"strconv"
	"strings"
	"time"

	"github.com/wmoutbox/wmoutbox/internal/bytesize"
	"github.com/wmoutbox/wmoutbox/outbox"
)

var statsCommand = &command{
	name:    "stats",
	args:    "[--fail-if-dead N] [--fail-if-oldest DURATION]",
	summary: "events by topic and status, claims in flight, relays, log slots, DEAD failure groups",
	help: `Prints tables: the events of each topic by status with how long the
oldest pending event has been due; the claims in flight by relay owner and
topic; the relays' heartbeats; on PostgreSQL, the database's log slots
(those a relay in log mode reads), with the log each holds back and how
long ago its reader confirmed a position, when there are any; and the DEAD
events by failure group (the groups of "dead --group"). --json prints one
object instead.

For cron jobs and CI checks, --fail-if-dead and --fail-if-oldest make the
command exit with code 3 when their condition holds (after printing).`,
	setup: func(fs *flag.FlagSet) action {
		failDead := fs.Int64("fail-if-dead", 0, "exit 3 when there are at least `N` DEAD events (N ≥ 1)")
		var failOldest durationFlag
		fs.Var(&failOldest, "fail-if-oldest", "exit 3 when a pending event has been due for at least `DURATION` (90s, 15m, 1d)")
		return func(ctx context.Context, c *cli, args []string) error {
			if *failDead < 0 {
				return usagef("--fail-if-dead: want a count of at least 1, got %d", *failDead)
			}
			if err := noArgs(args); err != nil {
				return err
			}
			return stats(ctx, c, *failDead, failOldest.d)
		}
	},
}

type topicStatsJSON struct {
	Topic                string     `json:"topic"`
	New                  int64      `json:"new"`
	Retry                int64      `json:"retry"`
	Done                 int64      `json:"done"`
	Dead                 int64      `json:"dead"`
	OldestDue            *time.Time `json:"oldest_due,omitempty"`
	OldestPendingSeconds float64    `json:"oldest_pending_seconds"`
}

type claimStatsJSON struct {
	Owner       string    `json:"owner"`
	Topic       string    `json:"topic"`
	Events      int64     `json:"events"`
	OldestClaim time.Time `json:"oldest_claim"`
	LeaseEnds   time.Time `json:"lease_ends"`
}

type deadGroupJSON struct {
	Group       string    `json:"group"`
	Count       int64     `json:"count"`
	FirstDied   time.Time `json:"first_died"`
	LastDied    time.Time `json:"last_died"`
	Topics      []string  `json:"topics"`
	Reason      string    `json:"reason"`
	SampleError string    `json:"sample_error"`
}

type relayJSON struct {
	Owner string    `json:"owner"`
	Until time.Time `json:"heartbeat_until"`
	Alive bool      `json:"alive"`
}

type slotJSON struct {
	Name      string `json:"name"`
	Active    bool   `json:"active"`
	LagBytes  int64  `json:"lag_bytes"`
	Lag       string `json:"lag"`
	WALStatus string `json:"wal_status"`
	Reader    string `json:"reader"`
	// ConfirmedAt is absent, and ConfirmedAgeSeconds 0, for a slot that
	// no relay of the table confirmed.
	ConfirmedAt         *time.Time `json:"confirmed_at,omitempty"`
	ConfirmedAgeSeconds float64    `json:"confirmed_age_seconds"`
}

type statsJSON struct {
	At         time.Time        `json:"at"`
	Table      string           `json:"table"`
	Topics     []topicStatsJSON `json:"topics"`
	Claims     []claimStatsJSON `json:"claims"`
	Relays     []relayJSON      `json:"relays"`
	Slots      []slotJSON       `json:"slots"`
	DeadGroups []deadGroupJSON  `json:"dead_groups"`
	Dead       int64            `json:"dead"`
	// Failed names the --fail-if checks whose condition holds.
	Failed []string `json:"failed"`
}

func stats(ctx context.Context, c *cli, failDead int64, failOldest time.Duration) error {
	d, s, err := c.openStore(ctx)
	if err != nil {
		return err
	}
	defer d.close()
	st, err := s.Stats(ctx)
	if err != nil {
		return err
	}
	groups, err := s.DeadGroups(ctx, outbox.DeadGroupQuery{})
	if err != nil {
		return err
	}
	out := statsJSON{At: st.At.UTC(), Table: d.qualifiedTable(), Topics: []topicStatsJSON{}, Claims: []claimStatsJSON{}, Relays: []relayJSON{}, Slots: []slotJSON{}, DeadGroups: []deadGroupJSON{}, Failed: []string{}}
	var oldest time.Duration
	for _, t := range st.Topics {
		j := topicStatsJSON{Topic: t.Topic, New: t.New, Retry: t.Retry, Done: t.Done, Dead: t.Dead, OldestDue: optionalTime(t.OldestDue)}
		if !t.OldestDue.IsZero() {
			waited := st.At.Sub(t.OldestDue)
			j.OldestPendingSeconds = waited.Seconds()
			oldest = max(oldest, waited)
		}
		out.Dead += t.Dead
		out.Topics = append(out.Topics, j)
	}
	for _, cl := range st.Claims {
		out.Claims = append(out.Claims, claimStatsJSON{cl.Owner, cl.Topic, cl.Events, cl.OldestClaim.UTC(), cl.LeaseEnds.UTC()})
	}
	for _, r := range st.Relays {
		out.Relays = append(out.Relays, relayJSON{r.Owner, r.Until.UTC(), r.Alive})
	}
	for _, s := range st.Slots {
		out.Slots = append(out.Slots, slotJSON{s.Name, s.Active, s.LagBytes, bytesize.Format(s.LagBytes), s.WALStatus, s.Reader,
			optionalTime(s.ConfirmedAt), s.ConfirmedAge.Seconds()})
	}
	for _, g := range groups {
		out.DeadGroups = append(out.DeadGroups, deadGroupJSON{g.Group, g.Count, g.FirstDied.UTC(), g.LastDied.UTC(), g.Topics, g.Reason, g.SampleError})
	}
	var found []string
	if failDead > 0 && out.Dead >= failDead {
		out.Failed = append(out.Failed, "fail-if-dead")
		found = append(found, strconv.FormatInt(out.Dead, 10)+" DEAD events (--fail-if-dead "+strconv.FormatInt(failDead, 10)+")")
	}
	if failOldest > 0 && oldest >= failOldest {
		out.Failed = append(out.Failed, "fail-if-oldest")
		found = append(found, "a pending event due for "+oldest.Round(time.Second).String()+" (--fail-if-oldest "+formatDuration(failOldest)+")")
	}
	if c.globals.json {
		err = c.writeJSON(out)
	} else {
		err = c.writeStats(st, groups)
	}
	if err != nil {
		return err
	}
	if len(found) > 0 {
		return &foundError{msg: strings.Join(found, "; ")}
	}
	return nil
}

func (c *cli) writeStats(st outbox.Stats, groups []outbox.DeadGroup) error {
	if len(st.Topics) == 0 {
		c.printf("No events.\n")
	} else {
		rows := make([][]string, 0, len(st.Topics))
		for _, t := range st.Topics {
			rows = append(rows, []string{t.Topic, count(t.New), count(t.Retry), count(t.Done), count(t.Dead), age(st.At, t.OldestDue)})
		}
		if err := c.writeTable([]string{"TOPIC", "NEW", "RETRY", "DONE", "DEAD", "OLDEST PENDING"}, rows); err != nil {
			return err
		}
	}
	c.printf("\n")
	if len(st.Claims) == 0 {
		c.printf("No claims in flight.\n")
	} else {
		rows := make([][]string, 0, len(st.Claims))
		for _, cl := range st.Claims {
			rows = append(rows, []string{cl.Owner, cl.Topic, count(cl.Events), age(st.At, cl.OldestClaim), timestamp(cl.LeaseEnds)})
		}
		if err := c.writeTable([]string{"OWNER", "TOPIC", "CLAIMED", "OLDEST CLAIM", "LEASE ENDS"}, rows); err != nil {
			return err
		}
	}
	c.printf("\n")
	if len(st.Relays) == 0 {
		c.printf("No relay heartbeats.\n")
	} else {
		rows := make([][]string, 0, len(st.Relays))
		for _, r := range st.Relays {
			state := "alive"
			if !r.Alive {
				state = "dead: claims handed back at the next heartbeat of a live relay"
			}
			rows = append(rows, []string{r.Owner, timestamp(r.Until), state})
		}
		if err := c.writeTable([]string{"RELAY", "HEARTBEAT UNTIL", "STATE"}, rows); err != nil {
			return err
		}
	}
	c.printf("\n")
	if len(st.Slots) > 0 {
		if err := c.writeSlots(st); err != nil {
			return err
		}
		c.printf("\n")
	}
	if len(groups) == 0 {
		c.printf("No DEAD events.\n")
		return nil
	}
	rows := make([][]string, 0, len(groups))
	for _, g := range groups {
		rows = append(rows, []string{g.Group, count(g.Count), timestamp(g.FirstDied), timestamp(g.LastDied),
			strings.Join(g.Topics, ","), clip(g.Reason, 80)})
	}
	return c.writeTable([]string{"DEAD GROUP", "COUNT", "FIRST DIED", "LAST DIED", "TOPICS", "REASON"}, rows)
}

// writeSlots writes the log slots: none but on PostgreSQL, and there only
// where a relay reads the log, so that their table is left out when empty.
func (c *cli) writeSlots(st outbox.Stats) error {
	rows := make([][]string, 0, len(st.Slots))
	for _, s := range st.Slots {
		active := "no"
		if s.Active {
			active = "yes"
		}
		rows = append(rows, []string{s.Name, active, bytesize.Format(s.LagBytes), count(s.LagBytes), cmp.Or(s.WALStatus, "-"),
			cmp.Or(s.Reader, "-"), age(st.At, s.ConfirmedAt)})
	}
	return c.writeTable([]string{"LOG SLOT", "ACTIVE", "LAG", "LAG BYTES", "WAL STATUS", "READER", "CONFIRMED AGO"}, rows)
}

func count(n int64) string { return strconv.FormatInt(n, 10) }

// clip cuts s to n runes with an ellipsis, on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
