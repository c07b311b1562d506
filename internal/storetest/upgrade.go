package storetest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// CheckEarlierClaimHolds checks a table migrated with the claims of an
// earlier version's relays in it. The caller stored, before migrating, an
// event "due" (due at [Start], unclaimed) and an event "leased", claimed by
// "old-relay" at Start as version 1 claimed: available_at moved to the end
// of its lease, Start plus a minute, and no locked_until; both of topic
// "orders". store reads the migrated table on clock, at Start. The earlier
// claim must hold until its lease ends, an outcome from no owner change
// nothing meanwhile, and the event then be claimed by a relay of this
// version.
func CheckEarlierClaimHolds[Tx any](t *testing.T, store *outbox.Store[Tx], clock *clocktest.Clock) {
	t.Helper()
	ctx := t.Context()
	d := store.Driver()
	claim := func() []outboxdriver.Row {
		t.Helper()
		p := ClaimParams("new-relay", "orders", 100, clock.Now())
		p.LockedUntil = clock.Now().Add(time.Minute)
		return Claim(t, d, p)
	}
	require.Equal(t, []string{"due"}, IDs(claim()), "the earlier relay's claim holds")
	n, err := d.RecordOutcomes(ctx, outboxdriver.RecordOutcomesParams{Now: clock.Now(),
		Outcomes: []outboxdriver.Outcome{dead("leased", "replayed by an operator's tool")}})
	require.NoError(t, err)
	require.Zero(t, n, "an outcome from no owner changes nothing under the earlier relay's claim")
	n, err = d.MarkDone(ctx, outboxdriver.MarkDoneParams{Now: clock.Now(), IDs: []string{"due"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	clock.Advance(time.Minute)
	claimed := claim()
	require.Equal(t, []string{"leased"}, IDs(claimed), "until its lease ends")
	require.Equal(t, "new-relay", claimed[0].LockedBy)
	require.True(t, Start.Add(2*time.Minute).Equal(claimed[0].LockedUntil), "leased until %v", claimed[0].LockedUntil)
	e, err := store.Get(ctx, "leased")
	require.NoError(t, err)
	require.Equal(t, outbox.StatusNew, e.Status)
	require.Zero(t, e.Attempts)
}
