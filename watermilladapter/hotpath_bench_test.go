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
// recorded in a batch. It reports the process's CPU per event (wall time
// per op is the rate one producer sustains) and the statements the
// settler issued per 1000 events.
func BenchmarkHotPath(b *testing.B) {
	store := &instantStore{}
	sub, err := NewSubscriber(store, SubscriberConfig{PollInterval: time.Hour, BacklogInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	router, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	var handled atomic.Int64
	router.AddConsumerHandler("count", "orders", sub, func(*message.Message) error {
		handled.Add(1)
		return nil
	})
	ran := make(chan error, 1)
	go func() { ran <- router.Run(context.Background()) }()
	<-router.Running()

	e, err := toEnvelope("orders", benchMessage())
	if err != nil {
		b.Fatal(err)
	}
	prepared, err := outbox.Prepare([]outbox.Envelope{e}, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	event := prepared[0]
	// Wait for handlers rather than overflow the hot queue.
	waitHandled := func(n int64) {
		for handled.Load() < n {
			time.Sleep(20 * time.Microsecond)
		}
	}
	var sent int64
	b.ReportAllocs()
	cpu := processCPU()
	for b.Loop() {
		event.ID = outbox.NewID()
		if !sub.offerHot(event, time.Now()) {
			b.Fatal("hot queue full")
		}
		if sent++; sent%500 == 0 {
			waitHandled(sent - 250)
		}
	}
	waitHandled(sent)
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
	statements, outcomes := store.recorded()
	b.ReportMetric(1000*float64(statements)/float64(outcomes), "statements/1000")
}
