package watermilladapter_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/pubsubtest"
	"github.com/wmoutbox/wmoutbox/internal/testdb"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/postgres"
)

// TestPubSub runs Watermill's universal Pub/Sub suite on PostgreSQL; the
// run on MySQL is outbox/mysql's TestPubSubOnMySQL.
func TestPubSub(t *testing.T) {
	pubsubtest.Run(t, func(t *testing.T) outbox.TxStore[pgx.Tx] {
		store, err := postgres.NewStore(testdb.New(t), postgres.Config{})
		require.NoError(t, err)
		return store
	})
}
