package postgres

// ClaimStatement is the claim SQL the store runs for one topic, with or
// without a cursor, for tests that read its plan.
func ClaimStatement(s *Store, withCursor bool) string {
	if withCursor {
		return s.t.sql.claimAfter[1]
	}
	return s.t.sql.claim[1]
}
