package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// CheckEarlierClaimHolds checks a table migrated with the claims of an
// earlier version's relays in it. The caller stored, before migrating, an
// event "due" (due at [Start], unclaimed) and an event "leased", claimed by
// "old-relay" at Start as version 1 claimed: available_at moved to the end
// of its lease, Start plus a minute, and no locked_until. store reads the
// migrated table on clock, at Start. The earlier claim must hold until its
// lease ends, an outcome from no owner changes nothing meanwhile, and the
// event then be claimed by a relay of this version.
func CheckEarlierClaimHolds(t *testing.T, store outbox.Store, clock *clocktest.Clock) {
	t.Helper()
	ctx := t.Context()
	req := outbox.ClaimRequest{Owner: "new-relay", LockTimeout: time.Minute}
	claimed, err := store.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, []string{"due"}, IDs(claimed), "the earlier relay's claim holds")
	n, err := store.UpdateStatus(ctx, "", outbox.Dead("leased", errors.New("replayed by an operator's tool")))
	require.NoError(t, err)
	require.Zero(t, n, "an outcome from no owner changes nothing under the earlier relay's claim")
	_, err = store.UpdateStatus(ctx, "new-relay", outbox.Done("due"))
	require.NoError(t, err)
	clock.Advance(time.Minute)
	claimed, err = store.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, []string{"leased"}, IDs(claimed), "until its lease ends")
	require.Equal(t, "new-relay", claimed[0].LockedBy)
	require.True(t, Start.Add(2*time.Minute).Equal(claimed[0].LockedUntil), "leased until %v", claimed[0].LockedUntil)
}
