package sqlite

// AggregateStatement is the SQL of an aggregate's events the store runs,
// with a cursor or without, for tests that read its plan.
func AggregateStatement(s *Store, before bool) string {
	if before {
		return s.Driver().(*driver).t.sql.queryAggregateBefore
	}
	return s.Driver().(*driver).t.sql.queryAggregate
}
