package watermilladapter_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// BenchmarkDrain measures the cold path end to end: a backlog of events is
// claimed, handed to a consumer that acks at once, and recorded DONE.
func BenchmarkDrain(b *testing.B) {
	batch := make([]outbox.Envelope, 1000)
	for i := range batch {
		batch[i] = outbox.NewJSON("OrderCreated", []byte(`{"orderId":"9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60","total":"188.98"}`))
	}
	for _, workers := range []int{4, 16} {
		b.Run(fmt.Sprint("workers=", workers), func(b *testing.B) {
			benchSubscriberDrain(b, batch, 20, watermilladapter.SubscriberConfig{WorkerCount: workers, BatchSize: 500})
		})
	}
}

// BenchmarkOrderedAggregate measures how fast one aggregate's events flow
// through an ordered relay: each is claimed once the DONE of the one
// before it is recorded, so the pace is a claim and an outcome statement
// per event, whatever the workers.
//
// With held back aggregates, as many other aggregates of the topic wait
// for a first event due tomorrow (a retry after an outage, a DEAD event
// left alone): what they cost the aggregate that moves.
func BenchmarkOrderedAggregate(b *testing.B) {
	batch := make([]outbox.Envelope, 200)
	for i := range batch {
		batch[i] = outbox.NewJSON("OrderCreated", []byte(`{"orderId":"9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60","total":"188.98"}`))
		batch[i].AggregateType, batch[i].AggregateID = "Order", "9f1c2e4a-7b3d-4c5e-8f6a-1b2c3d4e5f60"
	}
	for _, heldBack := range []int{0, 1000, 10000} {
		b.Run(fmt.Sprint("held_back=", heldBack), func(b *testing.B) {
			benchSubscriberDrain(b, batch, 1, watermilladapter.SubscriberConfig{Ordered: true}, func(store *postgres.Store) {
				writeHeldBack(b, store, heldBack)
			})
		})
	}
}

// writeHeldBack writes the first events of n aggregates of OrderCreated,
// due tomorrow.
func writeHeldBack(b *testing.B, store *postgres.Store, n int) {
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	events := make([]outbox.Envelope, 0, 1000)
	for i := range n {
		e := outbox.NewJSON("OrderCreated", []byte(`{}`))
		e.AggregateType, e.AggregateID, e.DeliverAfter = "Order", fmt.Sprint("held-", i), time.Now().Add(24*time.Hour)
		if events = append(events, e); len(events) == cap(events) || i == n-1 {
			err := store.InTx(b.Context(), func(ctx context.Context, tx pgx.Tx) error {
				_, err := writer.Write(ctx, tx, events...)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			events = events[:0]
		}
	}
}

// benchSubscriberDrain writes batch rounds times, then times a Subscriber
// of cfg from its start until it has handed over every event, acked at
// once, and recorded the last outcome.
func benchSubscriberDrain(b *testing.B, batch []outbox.Envelope, rounds int, cfg watermilladapter.SubscriberConfig, setUp ...func(*postgres.Store)) {
	if testing.Short() {
		b.Skip("needs PostgreSQL; skipped with -short")
	}
	store, err := postgres.NewStore(testdb.New(b), postgres.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range setUp {
		f(store)
	}
	writer, err := outbox.NewWriter(store, outbox.WriterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	backlog := rounds * len(batch)
	counted := &claimCount{Driver: store.Driver()}
	var drained time.Duration
	for b.Loop() {
		b.StopTimer()
		for range rounds {
			err := store.InTx(b.Context(), func(ctx context.Context, tx pgx.Tx) error {
				_, err := writer.Write(ctx, tx, batch...)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		sub, err := watermilladapter.NewSubscriber(storeOn(b, counted, nil), cfg)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		b.StartTimer()
		msgs, err := sub.Subscribe(b.Context(), "OrderCreated")
		if err != nil {
			b.Fatal(err)
		}
		for range backlog {
			(<-msgs).Ack()
		}
		if err := sub.Close(); err != nil { // records the last outcomes
			b.Fatal(err)
		}
		drained += time.Since(start)
	}
	b.ReportMetric(float64(backlog*b.N)/drained.Seconds(), "events/s")
	b.ReportMetric(float64(counted.n.Load())/float64(b.N), "claims/op")
}

// BenchmarkOrderedWrites measures an ordered relay fed by the Publisher of
// its process: 4 writers commit 1000 events, one per transaction, each of
// an aggregate of its own, while the relay claims them as their commits
// wake it. It reports the events handed over per second, from the first
// write to the last hand-over, the median latency from a commit (the
// first hook after it; 0 for an event claimed before that hook ran) to the
// hand-over, and the claims made. With held back aggregates, as many
// others wait for a first event due tomorrow.
func BenchmarkOrderedWrites(b *testing.B) {
	for _, heldBack := range []int{0, 10000} {
		b.Run(fmt.Sprint("held_back=", heldBack), func(b *testing.B) {
			if testing.Short() {
				b.Skip("needs PostgreSQL; skipped with -short")
			}
			store, err := postgres.NewStore(testdb.New(b), postgres.Config{})
			if err != nil {
				b.Fatal(err)
			}
			writeHeldBack(b, store, heldBack)
			const writers, perWriter = 4, 250
			counted := &claimCount{Driver: store.Driver()}
			var (
				elapsed   time.Duration
				latencies []time.Duration
			)
			for b.Loop() {
				sub, err := watermilladapter.NewSubscriber(storeOn(b, counted, nil), watermilladapter.SubscriberConfig{Ordered: true})
				if err != nil {
					b.Fatal(err)
				}
				pub, err := watermilladapter.NewPublisher(store, watermilladapter.PublisherConfig{HotPath: sub})
				if err != nil {
					b.Fatal(err)
				}
				msgs, err := sub.Subscribe(b.Context(), "OrderCreated")
				if err != nil {
					b.Fatal(err)
				}
				var committed sync.Map // aggregate id → commit time
				start := time.Now()
				errs := make(chan error, writers)
				for w := range writers {
					go func() {
						for i := range perWriter {
							id := fmt.Sprint("w", w, "-", i)
							err := store.InTx(b.Context(), func(ctx context.Context, tx pgx.Tx) error {
								// Registered first, this hook runs first after the commit.
								err := outbox.AfterCommit(ctx, func(context.Context) error {
									committed.Store(id, time.Now())
									return nil
								})
								if err != nil {
									return err
								}
								msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
								msg.Metadata.Set(watermilladapter.MetadataAggregateType, "Order")
								msg.Metadata.Set(watermilladapter.MetadataAggregateID, id)
								msg.SetContext(ctx)
								return pub.Publish("OrderCreated", msg)
							})
							if err != nil {
								errs <- err
								return
							}
						}
						errs <- nil
					}()
				}
				for range writers * perWriter {
					msg := <-msgs
					var latency time.Duration // 0: claimed before the hook that stamps the commit ran
					if at, ok := committed.Load(msg.Metadata.Get(watermilladapter.MetadataAggregateID)); ok {
						latency = time.Since(at.(time.Time))
					}
					latencies = append(latencies, latency)
					msg.Ack()
				}
				elapsed += time.Since(start)
				for range writers {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				if err := errors.Join(pub.Close(), sub.Close()); err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(latencies)
			b.ReportMetric(float64(writers*perWriter*b.N)/elapsed.Seconds(), "events/s")
			b.ReportMetric(float64(latencies[len(latencies)/2])/float64(time.Millisecond), "p50_ms")
			b.ReportMetric(float64(counted.n.Load())/float64(b.N), "claims/op")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// claimCount is a driver that counts the claims made through it.
type claimCount struct {
	outboxdriver.Driver[pgx.Tx]
	n atomic.Int64
}

func (c *claimCount) Claim(ctx context.Context, p *outboxdriver.ClaimParams) ([]outboxdriver.Row, error) {
	c.n.Add(1)
	return c.Driver.Claim(ctx, p)
}
