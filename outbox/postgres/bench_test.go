package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/wmoutbox/wmoutbox/internal/storetest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// benchPayload is the ≈300-byte JSON event of the benchmarks.
var benchPayload = []byte(`{"orderId":"9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60","customerId":"c-1029384756",` +
	`"items":[{"sku":"SKU-000123","qty":2,"price":"19.99"},{"sku":"SKU-004567","qty":1,"price":"149.00"}],` +
	`"currency":"EUR","total":"188.98","shipping":{"method":"express","country":"DE"},"createdAt":"2026-11-22T05:00:00Z"}`)

func benchEvent() outbox.Envelope {
	e := outbox.NewJSON("OrderCreated", benchPayload)
	e.AggregateType, e.AggregateID = "Order", "9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60"
	return e
}

// benchEvents is n copies of benchEvent, a batch to write.
func benchEvents(n int) []outbox.Envelope {
	events := make([]outbox.Envelope, n)
	for i := range events {
		events[i] = benchEvent()
	}
	return events
}

func benchStore(b *testing.B) (*postgres.Store, *outbox.Writer[pgx.Tx]) {
	return benchStoreWith(b, postgres.Config{})
}

// benchStoreWith is benchStore configured as cfg.
func benchStoreWith(b *testing.B, cfg postgres.Config) (*postgres.Store, *outbox.Writer[pgx.Tx]) {
	if testing.Short() {
		b.Skip("needs PostgreSQL; skipped with -short")
	}
	store, err := postgres.NewStore(testdb.New(b), cfg)
	if err != nil {
		b.Fatal(err)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	return store, writer
}

// BenchmarkWrite is one business transaction writing n events, their
// JSON payloads in payload or, with payload_doc, in payload_doc
// (Config.JSONPayloadColumn).
func BenchmarkWrite(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		for _, docs := range []bool{false, true} {
			b.Run(fmt.Sprint("events=", n, "/payload_doc=", docs), func(b *testing.B) {
				store, writer := benchStoreWith(b, postgres.Config{JSONPayloadColumn: docs})
				events := benchEvents(n)
				b.ReportAllocs()
				for b.Loop() {
					err := store.InTx(b.Context(), func(ctx context.Context, tx pgx.Tx) error {
						_, err := writer.Write(ctx, tx, events...)
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
			})
		}
	}
}

// BenchmarkClaimAndMarkDone is the relay's cold path: claim a batch of due
// events and record them DONE, in one statement per batch or, for
// comparison, one statement per event.
func BenchmarkClaimAndMarkDone(b *testing.B) {
	for _, perEvent := range []bool{false, true} {
		b.Run(fmt.Sprint("per-event=", perEvent), func(b *testing.B) { benchClaimAndMarkDone(b, perEvent) })
	}
}

func benchClaimAndMarkDone(b *testing.B, perEvent bool) {
	const batch = 100
	store, writer := benchStore(b)
	events := benchEvents(1000)
	p := benchClaim(batch, false)
	delivered := 0
	b.ReportAllocs()
	for b.Loop() {
		n := claimAndMarkDone(b, store, p, false, perEvent)
		if n == 0 {
			b.StopTimer()
			writeBacklog(b, store, writer, events, len(events))
			b.StartTimer()
		}
		delivered += n
	}
	b.ReportMetric(float64(delivered)/b.Elapsed().Seconds(), "events/s")
}

// benchClaim is the relay's claim of up to limit due events, at the time
// claim sets.
func benchClaim(limit int, ordered bool) *outboxdriver.ClaimParams {
	p := storetest.ClaimParams("bench", "OrderCreated", limit, time.Now())
	p.Ordered = ordered
	return p
}

// claim runs p at the time it is called and returns the rows, in due
// order as the relay sorts them; with after, it moves p.After past them,
// as the relay's cursor does.
func claim(b *testing.B, store *postgres.Store, p *outboxdriver.ClaimParams, after bool) []outboxdriver.Row {
	now := time.Now()
	p.Now, p.CreatedBefore, p.LockedUntil = now, now, now.Add(storetest.DefaultLease)
	rows, err := store.Driver().Claim(b.Context(), p)
	if err != nil {
		b.Fatal(err)
	}
	if at := storetest.SortClaimed(rows, p.Ordered); at != nil && after {
		p.After = at
	}
	return rows
}

// claimAndMarkDone claims one batch, following the cursor in p or not,
// and records it DONE, in one statement or one per event, and returns how
// many events it claimed.
func claimAndMarkDone(b *testing.B, store *postgres.Store, p *outboxdriver.ClaimParams, follow, perEvent bool) int {
	claimed := claim(b, store, p, follow)
	ids := storetest.IDs(claimed)
	if perEvent {
		for _, id := range ids {
			markDoneBench(b, store, id)
		}
	} else if len(ids) > 0 {
		markDoneBench(b, store, ids...)
	}
	return len(claimed)
}

// markDoneBench records ids DONE, as the relay does.
func markDoneBench(b *testing.B, store *postgres.Store, ids ...string) int64 {
	n, err := store.Driver().MarkDone(b.Context(), outboxdriver.MarkDoneParams{Now: time.Now(), IDs: ids})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// writeBacklog commits n events, in transactions of len(events).
func writeBacklog(b *testing.B, store *postgres.Store, writer *outbox.Writer[pgx.Tx], events []outbox.Envelope, n int) {
	for range n / len(events) {
		err := store.InTx(b.Context(), func(ctx context.Context, tx pgx.Tx) error {
			_, err := writer.Write(ctx, tx, events...)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimBacklog drains a backlog of 100,000 events in claims of 100,
// each recorded DONE in one statement: with a cursor, each claim starts
// where the previous one ended; without, each walks again over the due
// index entries the earlier claims left behind. "ordered" is the cursor
// case with ordered claims, every event an aggregate of its own.
func BenchmarkClaimBacklog(b *testing.B) {
	for _, withCursor := range []bool{false, true} {
		b.Run(fmt.Sprint("cursor=", withCursor), func(b *testing.B) { benchClaimBacklog(b, withCursor, false) })
	}
	b.Run("ordered", func(b *testing.B) { benchClaimBacklog(b, true, true) })
}

func benchClaimBacklog(b *testing.B, withCursor, ordered bool) {
	const backlog, batch = 100000, 100
	store, writer := benchStore(b)
	events := benchEvents(1000)
	drained, written := 0, 0
	for b.Loop() {
		b.StopTimer()
		for range backlog / len(events) {
			for i := range events {
				events[i].AggregateID = fmt.Sprint("order-", written)
				written++
			}
			writeBacklog(b, store, writer, events, len(events))
		}
		b.StartTimer()
		p := benchClaim(batch, ordered)
		for {
			n := claimAndMarkDone(b, store, p, withCursor, false)
			if n == 0 {
				break
			}
			drained += n
		}
	}
	b.ReportMetric(float64(drained)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkOrderedClaim is an ordered claim that finds nothing. With
// "behind=N", the first of the N events of the only aggregate is claimed:
// its cost must not grow with the events waiting behind it. With
// "notdue=N", each of N aggregates has one event, due tomorrow: the walk
// reads each aggregate's first event, which is what such a claim costs.
func BenchmarkOrderedClaim(b *testing.B) {
	for _, behind := range []int{1000, 100000} {
		b.Run(fmt.Sprint("behind=", behind), func(b *testing.B) { benchOrderedBehind(b, behind) })
	}
	for _, aggregates := range []int{1000, 10000} {
		b.Run(fmt.Sprint("notdue=", aggregates), func(b *testing.B) { benchOrderedNotDue(b, aggregates) })
	}
}

func benchOrderedNotDue(b *testing.B, aggregates int) {
	store, writer := benchStore(b)
	events := benchEvents(min(aggregates, 1000))
	for written := 0; written < aggregates; {
		for i := range events {
			events[i].AggregateID = fmt.Sprint("order-", written)
			events[i].DeliverAfter = time.Now().Add(24 * time.Hour)
			written++
		}
		writeBacklog(b, store, writer, events, len(events))
	}
	p := benchClaim(100, true)
	for b.Loop() {
		if claimed := claim(b, store, p, false); len(claimed) != 0 {
			b.Fatalf("claimed %d events due tomorrow", len(claimed))
		}
	}
}

func benchOrderedBehind(b *testing.B, behind int) {
	store, writer := benchStore(b)
	writeBacklog(b, store, writer, benchEvents(min(behind, 1000)), behind)
	p := benchClaim(100, true)
	if claimed := claim(b, store, p, false); len(claimed) != 1 {
		b.Fatalf("the first claim took %d events, want the first of the aggregate", len(claimed))
	}
	for b.Loop() {
		if claimed := claim(b, store, p, false); len(claimed) != 0 {
			b.Fatalf("claimed %d events while the first is in flight", len(claimed))
		}
	}
}

// BenchmarkReadEvents reads a batch of 200 DEAD events, to show what
// decoding a batch costs per event apart from a claim's writes: the rows
// of a claim and of a dead-event query are read alike.
func BenchmarkReadEvents(b *testing.B) {
	const batch = 200
	store, writer := benchStore(b)
	events := benchEvents(batch)
	writeBacklog(b, store, writer, events, batch)
	claimed := claim(b, store, benchClaim(batch, false), false)
	outcomes := make([]outboxdriver.Outcome, len(claimed))
	for i := range claimed {
		outcomes[i] = outboxdriver.Outcome{ID: claimed[i].ID, Status: int16(outbox.StatusDead), AttemptSpent: true, Error: "dead"}
	}
	n, err := store.Driver().RecordOutcomes(b.Context(), outboxdriver.RecordOutcomesParams{Now: time.Now(), Owner: "bench", Outcomes: outcomes})
	if err != nil || n != batch {
		b.Fatalf("killed %d of %d: %v", n, batch, err)
	}
	p := outboxdriver.QueryDeadParams{Limit: batch}
	b.ReportAllocs()
	for b.Loop() {
		read, err := store.Driver().QueryDead(b.Context(), p)
		if err != nil {
			b.Fatal(err)
		}
		if len(read) != batch {
			b.Fatalf("read %d events, want %d", len(read), batch)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRecordDone records a claimed batch of 1000 events DONE in one
// MarkDone call, the settler's statement after a drain's deliveries;
// only the recording is timed.
func BenchmarkRecordDone(b *testing.B) {
	const batch = 1000
	store, writer := benchStore(b)
	events := benchEvents(batch)
	p := benchClaim(batch, false)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		writeBacklog(b, store, writer, events, batch)
		ids := storetest.IDs(claim(b, store, p, false))
		if len(ids) != batch {
			b.Fatalf("claimed %d of %d", len(ids), batch)
		}
		b.StartTimer()
		if n := markDoneBench(b, store, ids...); n != batch {
			b.Fatalf("recorded %d of %d", n, batch)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/event")
}
