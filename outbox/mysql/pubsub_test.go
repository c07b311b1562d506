package mysql_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wmoutbox/wmoutbox/internal/pubsubtest"
	"github.com/wmoutbox/wmoutbox/internal/testmysql"
	"github.com/wmoutbox/wmoutbox/outbox/mysql"
)

// TestPubSubOnMySQL runs Watermill's universal Pub/Sub suite on MySQL.
func TestPubSubOnMySQL(t *testing.T) {
	pubsubtest.Run(t, func(t *testing.T) *mysql.Store {
		store, err := mysql.NewStore(testmysql.New(t), mysql.Config{})
		require.NoError(t, err)
		return store
	})
}
