package outbox_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// The texts users grep for, each with what produces it: changing one is a
// change for the CHANGELOG.
func TestErrorTexts(t *testing.T) {
	t.Parallel()
	invalid := func(e outbox.Envelope) error {
		_, err := outbox.Prepare([]outbox.Envelope{e}, prepareNow)
		return err
	}
	tests := []struct {
		name string
		err  error
		text string
		is   error
	}{
		{"oversized JSON payload", invalid(outbox.Envelope{Type: "T", PayloadJSON: jsonStringOfSize(outbox.MaxPayloadSize + 1)}),
			"outbox: invalid envelope 0: PayloadJSON: 1048577 bytes exceeds the limit of 1048576", outbox.ErrInvalidEnvelope},
		{"oversized bytes payload", invalid(outbox.Envelope{Type: "T", PayloadBytes: make([]byte, outbox.MaxPayloadSize+1)}),
			"outbox: invalid envelope 0: PayloadBytes: 1048577 bytes exceeds the limit of 1048576", outbox.ErrInvalidEnvelope},
		{"no payload", invalid(outbox.Envelope{Type: "T"}),
			"outbox: invalid envelope 0: PayloadJSON: set one of PayloadJSON and PayloadBytes", outbox.ErrInvalidEnvelope},
		{"two payloads", invalid(outbox.Envelope{Type: "T", PayloadJSON: []byte("{}"), PayloadBytes: []byte("x")}),
			"outbox: invalid envelope 0: PayloadBytes: set only one of PayloadJSON and PayloadBytes", outbox.ErrInvalidEnvelope},
		{"table missing", &outbox.NotMigratedError{Table: "outbox_event", Fix: "run postgres.Migrate or `wmoutbox migrate up`", Err: errors.New("42P01")},
			"table outbox_event does not exist: run postgres.Migrate or `wmoutbox migrate up`", outbox.ErrNotMigrated},
		{"table behind", &outbox.NotMigratedError{Table: "billing.outbox_event", Applied: 3, Needed: 6, Fix: "run postgres.Migrate or `wmoutbox migrate up`"},
			"table billing.outbox_event is at migration 3, this wmoutbox needs 6: run postgres.Migrate or `wmoutbox migrate up`", outbox.ErrNotMigrated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.EqualError(t, tt.err, tt.text)
			require.ErrorIs(t, tt.err, tt.is)
		})
	}
}
