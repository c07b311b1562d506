package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/claimorder"
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
	limit := p.Limit
	if p.Ordered && p.RunLength > 1 {
		limit = max(limit, p.RunRows)
	}
	require.LessOrEqual(t, len(rows), limit, "a claim takes at most its limit")
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

// SortClaimed puts rows in due order and returns the position of a cursor
// after them, by the relay's rules (package claimorder): what a claim
// returns in any order, the suite checks in the order the relay reads it.
func SortClaimed(rows []outboxdriver.Row, ordered bool) *outboxdriver.Position {
	return claimorder.Sort(rows, ordered)
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
