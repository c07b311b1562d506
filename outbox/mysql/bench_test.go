package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
)

// benchPayload is the ≈300-byte JSON event of the benchmarks.
var benchPayload = []byte(`{"orderId":"9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60","customerId":"c-1029384756",` +
	`"items":[{"sku":"SKU-000123","qty":2,"price":"19.99"},{"sku":"SKU-004567","qty":1,"price":"149.00"}],` +
	`"currency":"EUR","total":"188.98","shipping":{"method":"express","country":"DE"},"createdAt":"2026-11-22T05:00:00Z"}`)

// discardHot is a hot path that takes every event and drops it.
type discardHot struct{}

func (discardHot) HotLease() (string, time.Duration)                            { return "bench", 0 }
func (discardHot) TakesHot(string) bool                                         { return true }
func (discardHot) DeliverHot(context.Context, []outbox.Envelope, time.Duration) {}
func (discardHot) Committed([]outbox.Envelope)                                  {}

// benchStore returns a store on a fresh database, its DSN set to
// interpolate parameters or not, and a writer configured by cfg.
func benchStore(b *testing.B, interpolate bool, cfg outbox.WriterConfig) (*mysql.Store, *outbox.Writer[*sql.Tx]) {
	if testing.Short() {
		b.Skip("needs MySQL; skipped with -short")
	}
	dsn, err := mysqldriver.ParseDSN(testmysql.DSN(b))
	if err != nil {
		b.Fatal(err)
	}
	dsn.InterpolateParams = interpolate
	db, err := testmysql.Open(dsn.FormatDSN())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	store, err := mysql.NewStore(db, mysql.Config{})
	if err != nil {
		b.Fatal(err)
	}
	writer, err := outbox.NewWriter(store, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return store, writer
}

// BenchmarkWrite is one business transaction writing one event, with and
// without a hot path (a hot write is looked up before its commit, since
// MySQL cannot tell whether a savepoint holds it), with the driver
// preparing each statement or interpolating its parameters.
func BenchmarkWrite(b *testing.B) {
	for _, interpolate := range []bool{false, true} {
		for _, hot := range []bool{false, true} {
			b.Run(fmt.Sprintf("interpolateParams=%v/hot=%v", interpolate, hot), func(b *testing.B) {
				var cfg outbox.WriterConfig
				if hot {
					cfg.HotPath = discardHot{}
				}
				store, writer := benchStore(b, interpolate, cfg)
				event := outbox.NewJSON("OrderCreated", benchPayload)
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
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkClaimAndMarkDone is the relay's cold path: claim 100 due events
// (a transaction of four statements), following the cursor, and record
// them DONE in one statement; the backlog is written again, untimed, when
// it runs out.
func BenchmarkClaimAndMarkDone(b *testing.B) {
	store, writer := benchStore(b, true, outbox.WriterConfig{})
	events := make([]outbox.Envelope, 1000)
	for i := range events {
		events[i] = outbox.NewJSON("OrderCreated", benchPayload)
	}
	ctx := b.Context()
	driver := store.Driver()
	var after *outboxdriver.Position
	delivered := 0
	b.ReportAllocs()
	for b.Loop() {
		now := time.Now()
		p := &outboxdriver.ClaimParams{Owner: "bench", Topic: "OrderCreated", Now: now, CreatedBefore: now,
			LockedUntil: now.Add(time.Minute), Limit: 100, After: after}
		claimed, err := driver.Claim(ctx, p)
		if err != nil {
			b.Fatal(err)
		}
		if len(claimed) == 0 {
			b.StopTimer()
			after = nil
			err := store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				_, err := writer.Write(ctx, tx, events...)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			continue
		}
		after = storetest.SortClaimed(claimed, false)
		done := make([]string, len(claimed))
		for i := range claimed {
			done[i] = claimed[i].ID
		}
		if _, err := driver.MarkDone(ctx, outboxdriver.MarkDoneParams{Now: time.Now(), IDs: done}); err != nil {
			b.Fatal(err)
		}
		delivered += len(claimed)
	}
	b.ReportMetric(float64(delivered)/b.Elapsed().Seconds(), "events/s")
}
