package watermilladapter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/clocktest"
	"github.com/wmoutbox/wmoutbox/internal/codec"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// publishStart is the clock of the publisher tests on a fake store.
var publishStart = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// newTestPublisher returns a publisher on a fake store that keeps the
// rows it is given, on a fake clock at publishStart.
func newTestPublisher(t *testing.T, cfg PublisherConfig) (*Publisher[fakeTx], *insertDriver) {
	t.Helper()
	driver := &insertDriver{}
	pub, err := NewPublisher(fakeStore(t, driver, clocktest.New(publishStart)), cfg)
	require.NoError(t, err)
	return pub, driver
}

type hookCtxKey struct{}

// The Publisher runs its BeforeWrite hooks with the first message's
// context, after its Headers injector: headers they add come back as
// metadata, and an error refuses the Publish, with nothing written.
func TestPublisherBeforeWrite(t *testing.T) {
	t.Parallel()

	refused := errors.New("tenant suspended")
	pub, driver := newTestPublisher(t, PublisherConfig{
		BeforeWrite: []func(context.Context, []outbox.Envelope) error{func(ctx context.Context, events []outbox.Envelope) error {
			if events[0].TenantID == "suspended" {
				return refused
			}
			for i := range events {
				events[i].Headers["x-audit"] = ctx.Value(hookCtxKey{}).(string)
			}
			return nil
		}},
	})
	msg := message.NewMessage("m-1", []byte("x"))
	msg.SetContext(context.WithValue(t.Context(), hookCtxKey{}, "request-7"))
	require.NoError(t, pub.WithTx(fakeTx{}).Publish("orders", msg))
	require.Len(t, driver.rows, 1)
	row := storedRow(&driver.rows[0])
	headers, err := codec.DecodeHeaders(row.Headers)
	require.NoError(t, err)
	got := toMessage(&queued{row: row, headers: headers, source: SourceCold})
	require.Equal(t, "request-7", got.Metadata.Get("x-audit"))
	require.Equal(t, "m-1", got.UUID)

	suspended := message.NewMessage("m-2", []byte("x"))
	suspended.Metadata.Set(MetadataTenantID, "suspended")
	err = pub.WithTx(fakeTx{}).Publish("orders", suspended)
	require.ErrorIs(t, err, refused)
	require.Len(t, driver.rows, 1, "nothing more written")
}

// outbox_deliver_in delays the event by a Go duration from the write, on
// the store's clock. An unparsable, negative or doubled delay fails the
// Publish, naming the message, and writes nothing.
func TestPublisherDeliverIn(t *testing.T) {
	t.Parallel()

	pub, driver := newTestPublisher(t, PublisherConfig{})
	msg := message.NewMessage("m-1", []byte("x"))
	msg.Metadata.Set(MetadataDeliverIn, "1m30s")
	require.NoError(t, pub.WithTx(fakeTx{}).Publish("orders", msg))
	require.Len(t, driver.rows, 1)
	require.Equal(t, publishStart.Add(90*time.Second), driver.rows[0].AvailableAt)
	require.NotContains(t, driver.rows[0].Headers, MetadataDeliverIn, "a delay is no header")

	tests := []struct {
		name, deliverIn, deliverAfter, wantErr string
	}{
		{"not a duration", "soon", "", `metadata outbox_deliver_in: want a Go duration (90s, 1h30m), got "soon"`},
		{"negative", "-1s", "", "DeliverIn: -1s is negative"},
		{"with a time", "1m", publishStart.Add(time.Hour).Format(time.RFC3339), "DeliverIn: set only one of DeliverAfter and DeliverIn"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := message.NewMessage("bad-"+tt.name, []byte("x"))
			bad.Metadata.Set(MetadataDeliverIn, tt.deliverIn)
			if tt.deliverAfter != "" {
				bad.Metadata.Set(MetadataDeliverAfter, tt.deliverAfter)
			}
			err := pub.WithTx(fakeTx{}).Publish("orders", bad)
			require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
			require.ErrorContains(t, err, bad.UUID)
			require.ErrorContains(t, err, tt.wantErr)
			require.Len(t, driver.rows, 1, "nothing more written")
		})
	}
}
