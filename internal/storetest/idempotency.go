package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// keyed is JSONEvent i on topic with the idempotency key key.
func keyed(i int, topic, key string) outbox.Envelope {
	e := JSONEvent(i)
	e.Topic, e.IdempotencyKey = topic, key
	return e
}

// writeDetailed writes events with w in one transaction of InTx and
// returns what it reports.
func (f *fixture[Tx]) writeDetailed(t *testing.T, w *outbox.Writer[Tx], events ...outbox.Envelope) outbox.WriteResult {
	t.Helper()
	var res outbox.WriteResult
	require.NoError(t, f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		var err error
		res, err = w.WriteDetailed(ctx, tx, events...)
		return err
	}))
	return res
}

func testIdempotencyKeyWrittenTwiceInOneTransaction[Tx any](t *testing.T, f *fixture[Tx]) {
	var first, second, batch outbox.WriteResult
	again := keyed(2, "orders", "cmd-1")
	pair := []outbox.Envelope{keyed(3, "orders", "cmd-2"), JSONEvent(4), keyed(5, "orders", "cmd-2")}
	require.NoError(t, f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		var err error
		first, err = f.writer.WriteDetailed(ctx, tx, keyed(1, "orders", "cmd-1"))
		require.NoError(t, err)
		second, err = f.writer.WriteDetailed(ctx, tx, again)
		require.NoError(t, err)
		batch, err = f.writer.WriteDetailed(ctx, tx, pair...)
		require.NoError(t, err)
		// The transaction goes on: a later write in it succeeds.
		_, err = f.writer.Write(ctx, tx, JSONEvent(6))
		return err
	}))
	require.Nil(t, first.Skipped)
	require.Equal(t, first.IDs, second.IDs, "a skipped event's id is the stored one's")
	require.Len(t, second.Skipped, 1)
	require.Equal(t, outbox.SkippedEvent{Index: 0, Topic: "orders", IdempotencyKey: "cmd-1", ExistingID: first.IDs[0]},
		withoutID(second.Skipped[0]))
	require.NotEqual(t, first.IDs[0], second.Skipped[0].ID, "the id it would have had")

	require.Equal(t, batch.IDs[0], batch.IDs[2], "a key repeated in one call is written once")
	require.Len(t, batch.Skipped, 1)
	require.Equal(t, outbox.SkippedEvent{Index: 2, Topic: "orders", IdempotencyKey: "cmd-2", ExistingID: batch.IDs[0]},
		withoutID(batch.Skipped[0]))
	require.Equal(t, 4, f.Count(t))
	stored := f.get(t, first.IDs[0])
	require.Equal(t, "cmd-1", stored.IdempotencyKey)
	require.Empty(t, f.get(t, batch.IDs[1]).IdempotencyKey)
}

// withoutID is s without the id its event would have had, which a test
// cannot know beforehand.
func withoutID(s outbox.SkippedEvent) outbox.SkippedEvent {
	s.ID = ""
	return s
}

func testIdempotencyKeyInSequentialTransactions[Tx any](t *testing.T, f *fixture[Tx]) {
	hotWriter, hot := f.hotWriter(t, "relay-a", time.Minute)
	first := f.writeDetailed(t, hotWriter, keyed(1, "orders", "cmd-1"))
	require.Len(t, hot.Delivered(), 1)

	// The command retried: its event is skipped, a new one is written, and
	// only the new one reaches the hot path.
	retry := []outbox.Envelope{keyed(2, "orders", "cmd-1"), keyed(3, "orders", "cmd-2")}
	res := f.writeDetailed(t, hotWriter, retry...)
	require.Equal(t, first.IDs[0], res.IDs[0])
	require.Len(t, res.Skipped, 1)
	require.Equal(t, outbox.SkippedEvent{Index: 0, Topic: "orders", IdempotencyKey: "cmd-1", ExistingID: first.IDs[0]},
		withoutID(res.Skipped[0]))
	delivered := IDs(eventsOf(hot.Delivered()))
	require.Equal(t, []string{first.IDs[0], res.IDs[1]}, delivered, "a skipped event is not handed to the hot path")
	require.Equal(t, 2, f.Count(t))

	// Write keeps its ids: the stored event's for each envelope.
	ids := f.write(t, keyed(4, "orders", "cmd-1"))
	require.Equal(t, first.IDs, ids)
	require.Equal(t, 2, f.Count(t))
	stored := f.get(t, first.IDs[0])
	require.Equal(t, "cmd-1", stored.IdempotencyKey)
	require.JSONEq(t, string(JSONEvent(1).PayloadJSON), string(stored.PayloadJSON), "the first write's event stays")
}

// eventsOf returns envelopes as events, for IDs.
func eventsOf(envelopes []outbox.Envelope) []outbox.Event {
	events := make([]outbox.Event, len(envelopes))
	for i, e := range envelopes {
		events[i].Envelope = e
	}
	return events
}

func testIdempotencyKeyIsPerTopic[Tx any](t *testing.T, f *fixture[Tx]) {
	res := f.writeDetailed(t, f.writer, keyed(1, "orders", "k"), keyed(2, "payments", "k"))
	require.Nil(t, res.Skipped)
	require.Equal(t, 2, f.Count(t))
	res = f.writeDetailed(t, f.writer, keyed(3, "payments", "k"), keyed(4, "orders", "k"))
	require.Len(t, res.Skipped, 2)
	require.Equal(t, 2, f.Count(t))
}

// testIdempotencyKeyInConcurrentTransactions writes one key in two
// transactions open at once: the first, which a test owns, writes it and
// then commits or rolls back; the second, of InTx, writes it meanwhile
// and waits for the first (or, on a database of one writer at a time,
// begins after it). Both commit; one event is stored: the first's, or
// when the first rolled back, the second's.
func testIdempotencyKeyInConcurrentTransactions[Tx any](t *testing.T, f *fixture[Tx]) {
	for _, commit := range []bool{true, false} {
		ctx := t.Context()
		topic := "orders-" + map[bool]string{true: "commit", false: "rollback"}[commit]
		tx, err := f.Tx.Begin(ctx)
		require.NoError(t, err)
		first, err := f.writer.Write(ctx, tx, keyed(1, topic, "cmd-1"))
		require.NoError(t, err)

		type outcome struct {
			res outbox.WriteResult
			err error
		}
		done := make(chan outcome, 1)
		go func() {
			var o outcome
			o.err = f.Store.InTx(ctx, func(ctx context.Context, tx Tx) error {
				var err error
				o.res, err = f.writer.WriteDetailed(ctx, tx, keyed(2, topic, "cmd-1"))
				return err
			})
			done <- o
		}()
		if f.Blocked != nil {
			require.Eventually(t, func() bool { return f.Blocked(t) }, 10*time.Second, 150*time.Millisecond,
				"the second transaction waits for the first")
		}
		select {
		case o := <-done:
			t.Fatalf("the second write ended while the first transaction is open: %+v", o)
		default:
		}
		if commit {
			require.NoError(t, f.Tx.Commit(ctx, tx))
		} else {
			require.NoError(t, f.Tx.Rollback(ctx, tx))
		}
		var o outcome
		select {
		case o = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the second transaction did not end")
		}
		require.NoError(t, o.err, "the second transaction commits")
		events, err := f.Store.QueryEvents(ctx, outbox.EventQuery{Limit: 10})
		require.NoError(t, err)
		var stored []string
		for _, e := range events {
			if e.Topic == topic {
				stored = append(stored, e.ID)
			}
		}
		if commit {
			require.Equal(t, first, o.res.IDs)
			require.Len(t, o.res.Skipped, 1)
			require.Equal(t, first, stored, "one event stored, the first's")
		} else {
			require.Nil(t, o.res.Skipped)
			require.Equal(t, o.res.IDs, stored, "the first rolled back: the second's event is stored")
		}
	}
}

func testIdempotencyKeyRejected[Tx any](t *testing.T, f *fixture[Tx]) {
	strict, err := outbox.NewWriter(f.Store, outbox.WriterConfig{RejectDuplicateKeys: true})
	require.NoError(t, err)
	first := f.write(t, keyed(1, "orders", "cmd-1"))

	var rejected error
	var later []string
	batch := []outbox.Envelope{keyed(2, "orders", "cmd-2"), JSONEvent(3), keyed(4, "orders", "cmd-1")}
	require.NoError(t, f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		_, rejected = strict.Write(ctx, tx, batch...)
		// The caller decides: the transaction is usable, and commits.
		var err error
		later, err = strict.Write(ctx, tx, keyed(5, "orders", "cmd-3"))
		return err
	}))
	require.ErrorIs(t, rejected, outbox.ErrDuplicateKey)
	var dup *outbox.DuplicateKeyError
	require.ErrorAs(t, rejected, &dup)
	require.Len(t, dup.Events, 1)
	require.Equal(t, outbox.SkippedEvent{Index: 2, Topic: "orders", IdempotencyKey: "cmd-1", ExistingID: first[0]}, withoutID(dup.Events[0]))
	require.Equal(t, 2, f.Count(t), "nothing of the rejected write, the later write committed")
	require.Equal(t, "cmd-3", f.get(t, later[0]).IdempotencyKey)

	// A key repeated within one call is rejected too, before any insert.
	err = f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		_, err := strict.Write(ctx, tx, keyed(6, "orders", "cmd-4"), keyed(7, "orders", "cmd-4"))
		return err
	})
	require.ErrorIs(t, err, outbox.ErrDuplicateKey)
	require.Equal(t, 2, f.Count(t))
}

func testIdempotencyKeyLimits[Tx any](t *testing.T, f *fixture[Tx]) {
	// The longest keys, in characters of up to four bytes, are written.
	for _, char := range []string{"k", "é", "😀"} {
		key := strings.Repeat(char, 255)
		id := f.write(t, keyed(1, "orders", key))[0]
		require.Equal(t, key, f.get(t, id).IdempotencyKey)
	}
	for _, key := range []string{strings.Repeat("k", 256), "a\x00b", "\xff"} {
		err := f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
			_, err := f.writer.Write(ctx, tx, JSONEvent(2), keyed(3, "orders", key))
			return err
		})
		var invalid *outbox.ValidationError
		require.ErrorAs(t, err, &invalid)
		require.Equal(t, 1, invalid.Index)
		require.Equal(t, "IdempotencyKey", invalid.Field)
		require.Equal(t, 3, f.Count(t), "nothing written")
	}
}

func testIdempotencyKeyAndDuplicateEventID[Tx any](t *testing.T, f *fixture[Tx]) {
	e := keyed(1, "orders", "cmd-1")
	e.ID = "fixed-id"
	f.write(t, e)
	// The same event id under another key is a duplicate event, not a
	// taken key.
	again := e
	again.IdempotencyKey = "cmd-2"
	err := f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		_, err := f.writer.Write(ctx, tx, keyed(2, "orders", "cmd-3"), again)
		return err
	})
	require.ErrorIs(t, err, outbox.ErrDuplicateEvent)
	require.NotErrorIs(t, err, outbox.ErrDuplicateKey)
	require.Equal(t, 1, f.Count(t), "nothing of the failed batch written")

	// With a taken key in the same batch, the duplicate id still fails it.
	err = f.Store.InTx(t.Context(), func(ctx context.Context, tx Tx) error {
		_, err := f.writer.Write(ctx, tx, keyed(3, "orders", "cmd-1"), again)
		return err
	})
	require.ErrorIs(t, err, outbox.ErrDuplicateEvent)
	require.Equal(t, 1, f.Count(t))
}

func testIdempotencyKeyFreedWithItsRow[Tx any](t *testing.T, f *fixture[Tx]) {
	first := f.write(t, keyed(1, "orders", "cmd-1"))[0]
	require.EqualValues(t, 1, f.markDoneBy(t, f.DeleteDone.Driver(), first))
	require.Zero(t, f.Count(t))
	second := f.write(t, keyed(2, "orders", "cmd-1"))[0]
	require.NotEqual(t, first, second, "a key whose row was deleted is written again")
	require.Equal(t, 1, f.Count(t))
}
