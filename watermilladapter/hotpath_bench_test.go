package watermilladapter

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/wmoutbox/wmoutbox/outbox"
)

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkHotPath is what the relay costs per event on the hot path,
// database aside: a committed event handed to the subscriber, delivered
// through a Watermill router to a handler that returns nil, and its DONE
// recorded in a batch. It reports the process's CPU per event and the
// statements the settler issued per 1000 events.
//
// In "stream" events come as fast as the relay takes them, so its
// goroutines rarely wait; in "one-at-a-time" each event is handed over
// once the previous one was handled, so every goroutine on the way waits
// and is woken, as at the rates of a business write path (a few thousand
// events a second), where the relay's cost is mostly those wake-ups.
func BenchmarkHotPath(b *testing.B) {
	b.Run("stream", func(b *testing.B) {
		benchmarkHotPath(b, func(sent int64, handled *atomic.Int64, _ <-chan struct{}) {
			if sent%500 == 0 { // wait for handlers rather than overflow the hot queue
				waitHandled(handled, sent-250)
			}
		})
	})
	b.Run("one-at-a-time", func(b *testing.B) {
		benchmarkHotPath(b, func(_ int64, _ *atomic.Int64, each <-chan struct{}) { <-each })
	})
}

// benchmarkHotPath offers events to a subscriber behind a router, calling
// pace after each.
func benchmarkHotPath(b *testing.B, pace func(sent int64, handled *atomic.Int64, each <-chan struct{})) {
	driver := &instantDriver{}
	sub, err := NewSubscriber(fakeStore(b, driver, nil), SubscriberConfig{PollInterval: time.Hour, BacklogInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	each := make(chan struct{}, 1)
	router.AddConsumerHandler("count", "orders", sub, func(*message.Message) error {
		handled.Add(1)
		select {
		case each <- struct{}{}:
		default:
		}
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	<-router.Running()

	event, err := toEnvelope("orders", benchMessage())
	if err != nil {
		b.Fatal(err)
	}
	event.OccurredAt = time.Now() // as the writer fills it in
	var sent int64
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		event.ID = outbox.NewID()
		now := time.Now()
		if !sub.offerHot(event, now, now.Add(sub.cfg.LockTimeout)) {
			b.Fatal("hot queue full")
		}
		sent++
		pace(sent, &handled, each)
	}
	waitHandled(&handled, sent)
	cpu = processCPU() - cpu
	if err := router.Close(); err != nil {
		b.Fatal(err)
	}
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(sent)/1e3, "cpu-µs/event")
	statements, outcomes := driver.recorded()
	b.ReportMetric(1000*float64(statements)/float64(outcomes), "statements/1000")
}

// waitHandled returns once the handler has seen n events.
func waitHandled(handled *atomic.Int64, n int64) {
	for handled.Load() < n {
		time.Sleep(20 * time.Microsecond) // a benchmark's pacing: spinning would take the CPU it measures
	}
}
