package storetest

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// DefaultLease is the lease of the claims [ClaimParams] makes.
const DefaultLease = 5 * time.Minute

// ClaimParams returns the claim by owner of up to limit rows of topic due
// at now, none of them recent, leased for [DefaultLease]: what a relay
// asks of a driver, for the fields a test changes after.
func ClaimParams(owner, topic string, limit int, now time.Time) *outboxdriver.ClaimParams {
	now = now.Truncate(time.Microsecond) // as times are kept
	return &outboxdriver.ClaimParams{Owner: owner, Topic: topic, Now: now, CreatedBefore: now,
		LockedUntil: now.Add(DefaultLease), Limit: limit}
}

// Claim runs p on d and returns the rows in due order, as the relay sorts
// them. It fails the test on an error, and unless every row is leased as
// p asked and there are at most p.Limit of them.
func Claim(t testing.TB, d outboxdriver.Executor, p *outboxdriver.ClaimParams) []outboxdriver.Row {
	t.Helper()
	rows, err := d.Claim(context.Background(), p)
	require.NoError(t, err)
	require.LessOrEqual(t, len(rows), p.Limit, "a claim takes at most its limit")
	for i := range rows {
		r := &rows[i]
		require.Equal(t, p.Owner, r.LockedBy, "a claimed row is leased to the claim's owner")
		// Times are kept to the microsecond, cut or rounded.
		require.WithinDuration(t, p.Now, r.LockedAt, time.Microsecond, "%s locked at the claim's time", r.ID)
		require.WithinDuration(t, p.LockedUntil, r.LockedUntil, time.Microsecond, "%s locked until the claim's lease end", r.ID)
		require.Equal(t, p.Topic, r.Topic, "a claim takes rows of its topic")
	}
	SortClaimed(rows, p.Ordered)
	return rows
}

// SortClaimed puts rows in due order (available_at, then event id, byte
// by byte) and returns the position of a cursor after them: their last
// row in due order or, for an ordered claim, the row of the last aggregate
// in aggregate order (topic, aggregate type, rows without an aggregate id
// after those with one, then aggregate id or, without one, event id). It
// returns nil for no rows. These are the rules of the relay
// (watermilladapter), which sorts what a driver returns in any order and
// keeps the cursor.
func SortClaimed(rows []outboxdriver.Row, ordered bool) *outboxdriver.Position {
	if len(rows) == 0 {
		return nil
	}
	slices.SortFunc(rows, func(a, b outboxdriver.Row) int {
		return cmp.Or(a.AvailableAt.Compare(b.AvailableAt), strings.Compare(a.ID, b.ID))
	})
	last := &rows[len(rows)-1]
	if ordered {
		last = &rows[0]
		for i := range rows {
			if compareAggregates(&rows[i], last) > 0 {
				last = &rows[i]
			}
		}
	}
	keyless, key := aggregateKey(last)
	return &outboxdriver.Position{DueAt: last.AvailableAt, ID: last.ID,
		Topic: last.Topic, AggregateType: last.AggregateType, Keyless: keyless, Key: key}
}

func compareAggregates(a, b *outboxdriver.Row) int {
	aKeyless, aKey := aggregateKey(a)
	bKeyless, bKey := aggregateKey(b)
	keyless := 0
	switch {
	case aKeyless && !bKeyless:
		keyless = 1
	case !aKeyless && bKeyless:
		keyless = -1
	}
	return cmp.Or(strings.Compare(a.Topic, b.Topic), strings.Compare(a.AggregateType, b.AggregateType),
		keyless, strings.Compare(aKey, bKey))
}

func aggregateKey(r *outboxdriver.Row) (keyless bool, key string) {
	if r.AggregateID == "" {
		return true, r.ID
	}
	return false, r.AggregateID
}

// IDs returns the ids of events or rows, in order.
func IDs[E outbox.Event | outboxdriver.Row](items []E) []string {
	out := make([]string, len(items))
	for i := range items {
		switch e := any(items[i]).(type) {
		case outbox.Event:
			out[i] = e.ID
		case outboxdriver.Row:
			out[i] = e.ID
		}
	}
	return out
}
