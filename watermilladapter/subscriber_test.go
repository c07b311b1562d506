package watermilladapter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/outboxdriver"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
	"github.com/wmoutbox/wmoutbox/watermilladapter"
)

// noDriver is a driver never called: the configuration or the request
// fails first.
type noDriver struct{ outboxdriver.Driver[pgx.Tx] }

func TestNewSubscriberRejectsBadConfig(t *testing.T) {
	t.Parallel()
	store := storeOn(t, noDriver{}, nil)
	for name, cfg := range map[string]watermilladapter.SubscriberConfig{
		"WorkerCount":                        {WorkerCount: -1},
		"HotQueueCapacity":                   {HotQueueCapacity: -1},
		"ColdQueueCapacity":                  {ColdQueueCapacity: -1},
		"BatchSize":                          {BatchSize: -1},
		"OrderedRunLength":                   {OrderedRunLength: -1},
		"PollInterval":                       {PollInterval: -time.Second},
		"WakeCooldown":                       {WakeCooldown: -time.Millisecond},
		"LockTimeout":                        {LockTimeout: -time.Second},
		"SkipRecent":                         {SkipRecent: -time.Second},
		"DrainTimeout":                       {DrainTimeout: -time.Second},
		"BacklogInterval":                    {BacklogInterval: -time.Second},
		"Owner":                              {Owner: strings.Repeat("o", 129)},
		"Owner with a NUL":                   {Owner: "relay\x00"},
		"Owner not UTF-8":                    {Owner: "relay\xff"},
		"BatchSize above the stores' limit":  {BatchSize: 20000},
		"LockTimeout below the minimum":      {LockTimeout: time.Millisecond},
		"RetryPolicy base":                   {RetryPolicy: outbox.Backoff{Base: -time.Second}},
		"RetryPolicy attempts":               {RetryPolicy: outbox.Backoff{MaxAttempts: -1}},
		"ReleaseEarlierClaims with no Owner": {ReleaseEarlierClaims: true},
		"HeartbeatInterval":                  {HeartbeatInterval: -time.Second},
		"HeartbeatTimeout":                   {HeartbeatTimeout: -time.Second},
		"HeartbeatTimeout below twice HeartbeatInterval": {HeartbeatInterval: 3 * time.Second, HeartbeatTimeout: 5 * time.Second},
		"HeartbeatTimeout not below LockTimeout":         {HeartbeatTimeout: time.Minute, LockTimeout: time.Minute},
		"HeartbeatTimeout above LockTimeout's default":   {HeartbeatTimeout: 6 * time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sub, err := watermilladapter.NewSubscriber(store, cfg)
			require.ErrorIs(t, err, outbox.ErrInvalidRequest)
			require.ErrorContains(t, err, strings.Fields(name)[0])
			require.Nil(t, sub)
		})
	}
	_, err := watermilladapter.NewSubscriber[pgx.Tx](nil, watermilladapter.SubscriberConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	var noStore *postgres.Store
	_, err = watermilladapter.NewSubscriber(noStore, watermilladapter.SubscriberConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest, "a nil store of a dialect")
}

func TestSubscribeRefusesAnEmptyTopic(t *testing.T) {
	t.Parallel()
	sub, err := watermilladapter.NewSubscriber(storeOn(t, noDriver{}, nil), watermilladapter.SubscriberConfig{})
	require.NoError(t, err)
	defer sub.Close()
	_, err = sub.Subscribe(t.Context(), "")
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
}

// A topic is required: the envelope's default, the event type, would put
// the event on a topic the caller never named.
func TestPublishRefusesAnEmptyTopicAndNilMessages(t *testing.T) {
	t.Parallel()
	pub, err := watermilladapter.NewPublisher(storeOn(t, noDriver{}, nil), watermilladapter.PublisherConfig{OwnTransaction: true})
	require.NoError(t, err)
	msg := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	msg.Metadata.Set(watermilladapter.MetadataEventType, "OrderPlaced")
	require.ErrorIs(t, pub.Publish("", msg), outbox.ErrInvalidRequest)
	require.ErrorIs(t, pub.Publish("orders", msg, nil), outbox.ErrInvalidRequest)

	// An invalid envelope's error names its message and the topic.
	tooLong := message.NewMessage(watermill.NewUUID(), []byte(`{}`))
	tooLong.Metadata.Set(watermilladapter.MetadataEventType, strings.Repeat("t", 129))
	err = pub.WithTx(struct{ pgx.Tx }{}).Publish("orders", msg, tooLong) // refused before any statement
	require.ErrorIs(t, err, outbox.ErrInvalidEnvelope)
	require.ErrorContains(t, err, "publish message "+tooLong.UUID+" to orders")
}

func TestNewPublisherRejectsNoStore(t *testing.T) {
	t.Parallel()
	_, err := watermilladapter.NewPublisher[pgx.Tx](nil, watermilladapter.PublisherConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	var noStore *postgres.Store
	_, err = watermilladapter.NewPublisher(noStore, watermilladapter.PublisherConfig{})
	require.ErrorIs(t, err, outbox.ErrInvalidRequest)
	require.EqualError(t, err, "watermilladapter: new publisher: outbox: invalid request: no store")
}
