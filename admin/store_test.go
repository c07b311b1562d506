package admin_test

import (
	"github.com/wmoutbox/wmoutbox/admin"
	"github.com/wmoutbox/wmoutbox/outbox"
)

// Every dialect's store is an *outbox.Store of its transaction type
// (postgres.Store = outbox.Store[pgx.Tx]), so this assertion, on any Tx,
// says that they all are an admin.Store.
var _ admin.Store = (*outbox.Store[any])(nil)
