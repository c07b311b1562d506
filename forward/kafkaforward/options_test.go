package kafkaforward

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestPublisherIsDurableAndIdempotent(t *testing.T) {
	t.Parallel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	for name, tc := range map[string]struct {
		cfg      Config
		clientID string
	}{
		"defaults":           {Config{}, DefaultClientID},
		"client id":          {Config{ClientID: "orders-relay"}, "orders-relay"},
		"options come after": {Config{ClientID: "orders-relay", Options: []kgo.Opt{kgo.ClientID("from-options")}}, "from-options"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pub, err := NewPublisher(cluster.ListenAddrs(), tc.cfg)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, pub.Close()) })
			cl := pub.client
			require.Equal(t, kgo.AllISRAcks(), cl.OptValue(kgo.RequiredAcks))
			require.Equal(t, false, cl.OptValue(kgo.DisableIdempotentWrite), "idempotent")
			require.Equal(t, time.Duration(0), cl.OptValue(kgo.ProducerLinger))
			require.Equal(t, DefaultDeliveryTimeout, cl.OptValue(kgo.RecordDeliveryTimeout))
			require.Equal(t, tc.clientID, cl.OptValue(kgo.ClientID))
			id, _, err := cl.ProducerID(t.Context())
			require.NoError(t, err)
			require.GreaterOrEqual(t, id, int64(0), "an idempotent producer id, loaded by NewPublisher")
		})
	}
}
