package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// parseDuration reads a duration flag: a Go duration (90m, 1h30m) or a
// number of days, alone or before one (7d, 1d12h). It must be positive.
func parseDuration(s string) (time.Duration, error) {
	var days time.Duration
	rest := s
	if before, after, ok := strings.Cut(s, "d"); ok {
		n, err := strconv.ParseUint(before, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration (want 90m, 24h, 7d or 1d12h)", s)
		}
		days, rest = time.Duration(n)*24*time.Hour, after
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return 0, fmt.Errorf("%q is not a duration (want 90m, 24h, 7d or 1d12h)", s)
		}
	}
	if d+days <= 0 {
		return 0, fmt.Errorf("%q: the duration must be positive", s)
	}
	return d + days, nil
}

// formatDuration writes d as parseDuration reads it, with days for whole
// days: 7d, 36h, 90m.
func formatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// durationFlag is a flag of parseDuration's form.
type durationFlag struct{ d time.Duration }

func (f *durationFlag) String() string {
	if f == nil || f.d == 0 {
		return ""
	}
	return formatDuration(f.d)
}

func (f *durationFlag) Set(s string) (err error) {
	f.d, err = parseDuration(s)
	return err
}

// timeFlag is a point in time: RFC 3339, or a duration ago (24h, 7d).
type timeFlag struct {
	t   time.Time
	now func() time.Time
}

func (f *timeFlag) String() string {
	if f == nil || f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *timeFlag) Set(s string) error {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		f.t = t
		return nil
	}
	d, err := parseDuration(s)
	if err != nil {
		return errors.New("want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (24h, 7d)")
	}
	f.t = f.now().Add(-d)
	return nil
}

// listFlag is a repeatable flag whose values may also be comma-separated.
type listFlag []string

func (f *listFlag) String() string {
	if f == nil {
		return ""
	}
	return strings.Join(*f, ",")
}

func (f *listFlag) Set(s string) error {
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f = append(*f, v)
		}
	}
	return nil
}

// filterFlags are the flags that select DEAD events, shared by the dead
// subcommands.
type filterFlags struct {
	topic, eventType, aggregateType, aggregateID, errorContains, group string
	diedAfter, diedBefore                                              timeFlag
	ids                                                                listFlag
}

func (f *filterFlags) register(fs *flag.FlagSet) {
	f.diedAfter.now, f.diedBefore.now = time.Now, time.Now
	fs.StringVar(&f.topic, "topic", "", "only events of `topic`")
	fs.StringVar(&f.eventType, "type", "", "only events of event `type`")
	fs.StringVar(&f.aggregateType, "aggregate-type", "", "only events of aggregate `type`")
	fs.StringVar(&f.aggregateID, "aggregate-id", "", "only events of aggregate `id`")
	fs.StringVar(&f.errorContains, "error", "", "only events whose last error contains `text` (ignoring case)")
	fs.StringVar(&f.group, "group", "", "only events of failure `group` (see stats; \"ungrouped\" for those without)")
	fs.Var(&f.diedAfter, "died-after", "only events that went DEAD at or after `time` (RFC 3339, or a duration ago: 24h, 7d)")
	fs.Var(&f.diedBefore, "died-before", "only events that went DEAD before `time` (RFC 3339, or a duration ago: 24h, 7d)")
	fs.Var(&f.ids, "id", "only the events of these `ids` (repeatable, or comma-separated)")
}

// filter is the DEAD filter the flags set.
func (f *filterFlags) filter() outbox.DeadFilter {
	df := outbox.DeadFilter{
		EventType: outbox.EventType(f.eventType), Topic: f.topic,
		AggregateType: outbox.AggregateType(f.aggregateType), AggregateID: f.aggregateID,
		ErrorContains: f.errorContains, Group: f.group,
		DiedAfter: f.diedAfter.t, DiedBefore: f.diedBefore.t,
	}
	if len(f.ids) > 0 {
		df.IDs = []string(f.ids)
	}
	return df
}

// describeFilter says what f selects, as "topic=orders group=ab12": for
// prompts and messages.
func describeFilter(f outbox.DeadFilter) string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, name+"="+v)
		}
	}
	if f.IDs != nil {
		add("id", strings.Join(f.IDs, ","))
	}
	add("topic", f.Topic)
	add("type", string(f.EventType))
	add("aggregate-type", string(f.AggregateType))
	add("aggregate-id", f.AggregateID)
	if f.ErrorContains != "" {
		add("error", strconv.Quote(f.ErrorContains))
	}
	add("group", f.Group)
	if !f.DiedAfter.IsZero() {
		add("died-after", f.DiedAfter.UTC().Format(time.RFC3339))
	}
	if !f.DiedBefore.IsZero() {
		add("died-before", f.DiedBefore.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "(no filter)"
	}
	return strings.Join(parts, " ")
}

// emptyFilter reports whether f restricts nothing, as the store refuses.
func emptyFilter(f outbox.DeadFilter) bool {
	return describeFilter(f) == "(no filter)"
}
