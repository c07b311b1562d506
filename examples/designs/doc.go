// Package designs holds no code, only tests: each design in
// docs/coming-from.md configured as that page says, and checked. A test
// per design a user brings (the order service, the logistics plan, the
// chat backend, the Java outbox framework) builds a relay on PostgreSQL
// with the settings of the page's tables, copied as they are written
// there, and checks what the design promises: its retry schedule and final
// status, the metrics its alerts use, its dead-letter review and resend,
// its retention, and its operator queries, run as the page gives them.
//
// When the page and the library drift apart, these tests fail: change the
// page or the library, and the test with it.
//
// The tests use the public API only (and internal/testdb for a database),
// with the fake clock of package outboxtest to drive retry schedules and
// retention without waiting for them. They need PostgreSQL
// (TEST_DATABASE_URL), as every test of this repository that does.
package designs
