package watermilladapter_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/pubsubtest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// TestPubSub runs Watermill's universal Pub/Sub suite on PostgreSQL; the
// run on MySQL is outbox/mysql's TestPubSubOnMySQL.
func TestPubSub(t *testing.T) {
	t.Parallel()
	pubsubtest.Run(t, func(t *testing.T) *postgres.Store {
		store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
		require.NoError(t, err)
		return store
	})
}
