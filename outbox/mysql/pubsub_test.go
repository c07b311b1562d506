package mysql_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/pubsubtest"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
)

// TestPubSubOnMySQL runs Watermill's universal Pub/Sub suite on MySQL.
func TestPubSubOnMySQL(t *testing.T) {
	pubsubtest.Run(t, func(t *testing.T) outbox.TxStore[*sql.Tx] {
		store, err := mysql.NewStore(testmysql.New(t), mysql.Config{})
		require.NoError(t, err)
		return store
	})
}
