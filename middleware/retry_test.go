package middleware_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	wmmw "github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/stretchr/testify/require"

	outboxmw "github.com/wmoutbox/wmoutbox/middleware"
	"github.com/wmoutbox/wmoutbox/outbox"
)

func TestShouldRetryLeavesOutboxErrorClassesToTheOutbox(t *testing.T) {
	t.Parallel()
	transient := errors.New("connection reset")
	for _, tc := range []struct {
		name  string
		err   error
		calls int
	}{
		{"permanent", outbox.Permanent(errors.New("schema violation")), 1},
		{"retry after", outbox.RetryAfter(time.Minute, errors.New("rate limited")), 1},
		{"fail, retry after", outbox.FailRetryAfter(time.Minute, errors.New("HTTP 429")), 1},
		{"wrapped permanent", errors.Join(errors.New("publish"), outbox.Permanent(transient)), 1},
		{"other", transient, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			retry := wmmw.Retry{MaxRetries: 3, InitialInterval: time.Microsecond, ShouldRetry: outboxmw.ShouldRetry}
			_, err := retry.Middleware(func(*message.Message) ([]*message.Message, error) {
				calls++
				return nil, tc.err
			})(message.NewMessage("1", nil))
			require.Equal(t, tc.calls, calls)
			require.ErrorIs(t, err, tc.err, "the handler's error, with its class, reaches RecordErrors")
		})
	}
}
