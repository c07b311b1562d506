// Package testamqp gives tests the RabbitMQ they run against. Tests only.
package testamqp

import (
	"os"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/wmoutbox/wmoutbox/internal/testenv"
)

// DefaultURL is the broker when TEST_AMQP_URL is not set.
const DefaultURL = "amqp://guest:guest@127.0.0.1:5672/"

// Broker returns the URL of the tests' RabbitMQ (TEST_AMQP_URL, by default
// the local server) and a connection to it of the test's own, closed at
// cleanup. With no broker answering the test skips, or fails under
// CI=true, where a missing broker is a broken setup.
func Broker(t testing.TB) (string, *amqp091.Connection) {
	t.Helper()
	url := os.Getenv("TEST_AMQP_URL")
	if url == "" {
		url = DefaultURL
	}
	conn, err := amqp091.Dial(url)
	if err != nil {
		testenv.SkipOrFail(t, "testamqp: RabbitMQ at TEST_AMQP_URL unreachable: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return url, conn
}
