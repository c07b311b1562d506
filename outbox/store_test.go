package outbox_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

func TestClaimRequestNormalize(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		in      outbox.ClaimRequest
		want    outbox.ClaimRequest
		wantErr bool
	}{
		{name: "owner required", in: outbox.ClaimRequest{}, wantErr: true},
		{name: "owner at limit", in: outbox.ClaimRequest{Owner: strings.Repeat("é", outbox.MaxOwnerLen)},
			want: outbox.ClaimRequest{Owner: strings.Repeat("é", outbox.MaxOwnerLen), Limit: 50, LockTimeout: 5 * time.Minute}},
		{name: "owner too long", in: outbox.ClaimRequest{Owner: strings.Repeat("o", outbox.MaxOwnerLen+1)}, wantErr: true},
		{name: "owner with NUL", in: outbox.ClaimRequest{Owner: "relay\x00"}, wantErr: true},
		{name: "owner not UTF-8", in: outbox.ClaimRequest{Owner: "relay\xff"}, wantErr: true},
		{name: "defaults", in: outbox.ClaimRequest{Owner: "relay-1"},
			want: outbox.ClaimRequest{Owner: "relay-1", Limit: outbox.DefaultClaimLimit, LockTimeout: outbox.DefaultLockTimeout}},
		{name: "given values kept",
			in:   outbox.ClaimRequest{Owner: "r", Limit: 7, LockTimeout: time.Second, SkipRecent: time.Minute, Topics: []string{"a", "b"}},
			want: outbox.ClaimRequest{Owner: "r", Limit: 7, LockTimeout: time.Second, SkipRecent: time.Minute, Topics: []string{"a", "b"}}},
		{name: "limit at maximum", in: outbox.ClaimRequest{Owner: "r", Limit: 10000},
			want: outbox.ClaimRequest{Owner: "r", Limit: 10000, LockTimeout: 5 * time.Minute}},
		{name: "limit over maximum", in: outbox.ClaimRequest{Owner: "r", Limit: 10001}, wantErr: true},
		{name: "negative limit", in: outbox.ClaimRequest{Owner: "r", Limit: -1}, wantErr: true},
		{name: "negative lock timeout", in: outbox.ClaimRequest{Owner: "r", LockTimeout: -time.Second}, wantErr: true},
		{name: "negative skip-recent", in: outbox.ClaimRequest{Owner: "r", SkipRecent: -time.Second}, wantErr: true},
		{name: "aggregates without a type are global",
			in: outbox.ClaimRequest{Owner: "r", Ordered: true, Aggregates: []outbox.Aggregate{
				{Topic: "t", Type: "Order", ID: "1"}, {Topic: "t", ID: "2"}}},
			want: outbox.ClaimRequest{Owner: "r", Limit: 50, LockTimeout: 5 * time.Minute, Ordered: true, Aggregates: []outbox.Aggregate{
				{Topic: "t", Type: "Order", ID: "1"}, {Topic: "t", Type: outbox.GlobalAggregate, ID: "2"}}}},
		{name: "aggregate without a topic",
			in: outbox.ClaimRequest{Owner: "r", Ordered: true, Aggregates: []outbox.Aggregate{{Type: "Order", ID: "1"}}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			in := tt.in
			in.Aggregates = slices.Clone(tt.in.Aggregates)
			got, err := in.Normalize()
			require.Equal(t, tt.in.Aggregates, in.Aggregates, "the caller's aggregates are left as they are")
			if tt.wantErr {
				require.ErrorIs(t, err, outbox.ErrInvalidRequest)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestClaimRequestDefaults(t *testing.T) {
	t.Parallel()

	require.Equal(t, 50, outbox.DefaultClaimLimit)
	require.Equal(t, 5*time.Minute, outbox.DefaultLockTimeout)
	require.Equal(t, 100, outbox.DefaultDeadLimit)
	require.Equal(t, 1000, outbox.DefaultPurgeBatch)
}

func TestPollRequestNormalize(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		in      outbox.PollRequest
		want    outbox.PollRequest
		wantErr bool
	}{
		{name: "defaults", in: outbox.PollRequest{}, want: outbox.PollRequest{Limit: 50}},
		{name: "given values kept", in: outbox.PollRequest{Limit: 3, SkipRecent: time.Second, Topics: []string{"t"}},
			want: outbox.PollRequest{Limit: 3, SkipRecent: time.Second, Topics: []string{"t"}}},
		{name: "limit at maximum", in: outbox.PollRequest{Limit: 10000}, want: outbox.PollRequest{Limit: 10000}},
		{name: "limit over maximum", in: outbox.PollRequest{Limit: 10001}, wantErr: true},
		{name: "negative limit", in: outbox.PollRequest{Limit: -5}, wantErr: true},
		{name: "negative skip-recent", in: outbox.PollRequest{SkipRecent: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := tt.in.Normalize()
			if tt.wantErr {
				require.ErrorIs(t, err, outbox.ErrInvalidRequest)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDeadQueryNormalize(t *testing.T) {
	t.Parallel()

	filter := outbox.DeadFilter{IDs: []string{"a"}, EventType: "T", Topic: "t", DiedBefore: time.Unix(100, 0)}
	tests := []struct {
		name    string
		in      outbox.DeadQuery
		want    outbox.DeadQuery
		wantErr bool
	}{
		{name: "defaults", in: outbox.DeadQuery{}, want: outbox.DeadQuery{Limit: 100}},
		{name: "filter and cursor kept", in: outbox.DeadQuery{DeadFilter: filter, After: "x", Limit: 10},
			want: outbox.DeadQuery{DeadFilter: filter, After: "x", Limit: 10}},
		{name: "limit at maximum", in: outbox.DeadQuery{Limit: 10000}, want: outbox.DeadQuery{Limit: 10000}},
		{name: "limit over maximum", in: outbox.DeadQuery{Limit: 10001}, wantErr: true},
		{name: "negative limit", in: outbox.DeadQuery{Limit: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := tt.in.Normalize()
			if tt.wantErr {
				require.ErrorIs(t, err, outbox.ErrInvalidRequest)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestDeadFilterValidateReplay(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		filter  outbox.DeadFilter
		wantErr bool
	}{
		{name: "zero filter", filter: outbox.DeadFilter{}, wantErr: true},
		{name: "empty ids", filter: outbox.DeadFilter{IDs: []string{}}},
		{name: "ids", filter: outbox.DeadFilter{IDs: []string{"a"}}},
		{name: "event type", filter: outbox.DeadFilter{EventType: "T"}},
		{name: "topic", filter: outbox.DeadFilter{Topic: "t"}},
		{name: "died before", filter: outbox.DeadFilter{DiedBefore: time.Unix(100, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			err := tt.filter.ValidateReplay()
			if tt.wantErr {
				require.ErrorIs(t, err, outbox.ErrInvalidRequest)
				require.ErrorContains(t, err, "DiedBefore: time.Now()")
				return
			}
			require.NoError(t, err)
		})
	}
}

func TestPurgeRequestNormalize(t *testing.T) {
	t.Parallel()

	const day = 24 * time.Hour
	terminal := []outbox.Status{outbox.StatusDone, outbox.StatusDead}
	tests := []struct {
		name    string
		in      outbox.PurgeRequest
		want    outbox.PurgeRequest
		wantErr bool
	}{
		{name: "retention required", in: outbox.PurgeRequest{}, wantErr: true},
		{name: "negative retention", in: outbox.PurgeRequest{OlderThan: -day}, wantErr: true},
		{name: "defaults", in: outbox.PurgeRequest{OlderThan: day},
			want: outbox.PurgeRequest{OlderThan: day, BatchSize: 1000, Statuses: terminal}},
		{name: "given values kept", in: outbox.PurgeRequest{OlderThan: time.Nanosecond, BatchSize: 5, Statuses: []outbox.Status{outbox.StatusDead}},
			want: outbox.PurgeRequest{OlderThan: time.Nanosecond, BatchSize: 5, Statuses: []outbox.Status{outbox.StatusDead}}},
		{name: "done only", in: outbox.PurgeRequest{OlderThan: day, Statuses: []outbox.Status{outbox.StatusDone}},
			want: outbox.PurgeRequest{OlderThan: day, BatchSize: 1000, Statuses: []outbox.Status{outbox.StatusDone}}},
		{name: "batch at maximum", in: outbox.PurgeRequest{OlderThan: day, BatchSize: 100000},
			want: outbox.PurgeRequest{OlderThan: day, BatchSize: 100000, Statuses: terminal}},
		{name: "batch over maximum", in: outbox.PurgeRequest{OlderThan: day, BatchSize: 100001}, wantErr: true},
		{name: "negative batch", in: outbox.PurgeRequest{OlderThan: day, BatchSize: -1}, wantErr: true},
		{name: "NEW rows", in: outbox.PurgeRequest{OlderThan: day, Statuses: []outbox.Status{outbox.StatusNew}}, wantErr: true},
		{name: "RETRY rows", in: outbox.PurgeRequest{OlderThan: day, Statuses: []outbox.Status{outbox.StatusDone, outbox.StatusRetry}}, wantErr: true},
		{name: "unknown status", in: outbox.PurgeRequest{OlderThan: day, Statuses: []outbox.Status{outbox.Status(9)}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			got, err := tt.in.Normalize()
			if tt.wantErr {
				require.ErrorIs(t, err, outbox.ErrInvalidRequest)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestStatusUpdateConstructors(t *testing.T) {
	t.Parallel()

	next := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	boom := errors.New("boom")
	tests := []struct {
		name         string
		update       outbox.StatusUpdate
		want         outbox.StatusUpdate
		attemptSpent bool
	}{
		{"done", outbox.Done("e1"), outbox.StatusUpdate{ID: "e1", Status: outbox.StatusDone}, false},
		{"retry", outbox.Retry("e1", next, boom), outbox.StatusUpdate{ID: "e1", Status: outbox.StatusRetry, NextAt: next, Error: "boom"}, true},
		{"retry without error", outbox.Retry("e1", next, nil), outbox.StatusUpdate{ID: "e1", Status: outbox.StatusRetry, NextAt: next}, true},
		{"dead", outbox.Dead("e1", boom), outbox.StatusUpdate{ID: "e1", Status: outbox.StatusDead, Error: "boom"}, true},
		{"dead without error", outbox.Dead("e1", nil), outbox.StatusUpdate{ID: "e1", Status: outbox.StatusDead}, true},
		{"defer", outbox.Defer("e1", next, boom), outbox.StatusUpdate{ID: "e1", Status: outbox.StatusNew, NextAt: next, Error: "boom"}, false},
		{"defer without reason", outbox.Defer("e1", next, nil), outbox.StatusUpdate{ID: "e1", Status: outbox.StatusNew, NextAt: next}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			require.Equal(t, tt.want, tt.update)
			require.NoError(t, tt.update.Validate())
			require.Equal(t, tt.attemptSpent, tt.update.AttemptSpent())
		})
	}
}

func TestStatusUpdateValidate(t *testing.T) {
	t.Parallel()

	next := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		update outbox.StatusUpdate
	}{
		{"no id", outbox.Done("")},
		{"retry without a next time", outbox.Retry("e1", time.Time{}, errors.New("x"))},
		{"deferral without a next time", outbox.Defer("e1", time.Time{}, nil)},
		{"unknown status", outbox.StatusUpdate{ID: "e1", Status: outbox.Status(4), NextAt: next}},
		{"unknown status without a time", outbox.StatusUpdate{ID: "e1", Status: outbox.Status(4)}},
		{"negative status", outbox.StatusUpdate{ID: "e1", Status: outbox.Status(-1), NextAt: next}},
		{"zero value", outbox.StatusUpdate{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			require.ErrorIs(t, tt.update.Validate(), outbox.ErrInvalidRequest)
		})
	}
}

func TestInsertRows(t *testing.T) {
	t.Parallel()
	delayed := outbox.Envelope{ID: "delayed", DeliverAfter: time.Now().Add(time.Hour)}
	hot := []outbox.Envelope{{ID: "h1"}, delayed, {ID: "h2"}}
	cold := []outbox.Envelope{{ID: "c1"}}
	rows := func(lease outbox.Lease) map[string]bool {
		got := map[string]bool{}
		var order []string
		for e, claimed := range outbox.InsertRows(hot, cold, lease) {
			got[e.ID] = claimed
			order = append(order, e.ID)
		}
		require.Equal(t, []string{"h1", "delayed", "h2", "c1"}, order, "hot, then cold")
		return got
	}
	require.Equal(t, map[string]bool{"h1": true, "delayed": false, "h2": true, "c1": false}, rows(outbox.Lease{Owner: "relay"}),
		"hot events claimed, except a delayed one")
	require.Equal(t, map[string]bool{"h1": false, "delayed": false, "h2": false, "c1": false}, rows(outbox.Lease{}),
		"no owner, no claim")
	for e := range outbox.InsertRows(hot, cold, outbox.Lease{}) {
		require.Equal(t, "h1", e.ID)
		break
	}
}
