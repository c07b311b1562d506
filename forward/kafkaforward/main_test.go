package kafkaforward_test

import (
	"testing"

	"github.com/rcrowley/go-metrics"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Sarama records metrics with go-metrics, whose meters start one
	// process-wide goroutine that never ends (meterArbiter.tick). Turning
	// the metrics off, as Sarama's own tests do, keeps the leak check free
	// of exceptions; the producer works the same.
	metrics.UseNilMetrics = true
	// A circuit breaker Sarama opens (TestBreakerRefusalCarriesTheFailureBehindIt)
	// sleeps out its 10 s in a goroutine of its own, which no Close ends.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/eapache/go-resiliency/breaker.(*Breaker).timer"))
}
