package interop_test

import (
	"testing"

	"github.com/rcrowley/go-metrics"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// watermill-kafka's publisher and subscriber run on Sarama, which
	// records metrics with go-metrics, whose meters start one
	// process-wide goroutine that never ends (meterArbiter.tick). Turning
	// the metrics off, as Sarama's own tests do, keeps the leak check free
	// of exceptions; the producer and the consumer work the same.
	metrics.UseNilMetrics = true
	goleak.VerifyTestMain(m)
}
