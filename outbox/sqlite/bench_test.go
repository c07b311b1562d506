package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/sqlite"
)

// discardHot is a hot path that takes every event and drops it.
type discardHot struct{}

func (discardHot) HotLease() (string, time.Duration)                            { return "bench", 0 }
func (discardHot) TakesHot(string) bool                                         { return true }
func (discardHot) DeliverHot(context.Context, []outbox.Envelope, time.Duration) {}
func (discardHot) Committed([]outbox.Envelope)                                  {}

// BenchmarkWrite is one business transaction writing one event, with and
// without a hot path: a hot write is looked up before its commit, since
// SQLite cannot tell whether a savepoint holds it.
func BenchmarkWrite(b *testing.B) {
	for _, hot := range []bool{false, true} {
		b.Run(fmt.Sprint("hot=", hot), func(b *testing.B) {
			db, err := sqlite.Open(b.Context(), filepath.Join(b.TempDir(), "outbox.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = db.Close() })
			if err := sqlite.Migrate(b.Context(), db, sqlite.Config{}); err != nil {
				b.Fatal(err)
			}
			store, err := sqlite.NewStore(db, sqlite.Config{})
			if err != nil {
				b.Fatal(err)
			}
			var cfg outbox.WriterConfig
			if hot {
				cfg.HotPath = discardHot{}
			}
			writer, err := outbox.NewWriter(store, cfg)
			if err != nil {
				b.Fatal(err)
			}
			event := outbox.NewJSON("OrderCreated", []byte(`{"orderId":"9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60","total":"188.98"}`))
			b.ReportAllocs()
			for b.Loop() {
				err := store.InTx(b.Context(), func(ctx context.Context, tx *sql.Tx) error {
					_, err := writer.Write(ctx, tx, event)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
