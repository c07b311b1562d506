-- wmoutbox migration 4: ordered delivery per aggregate, for SQLite.
--
-- Written with the default table name, like migrations 1 to 3.
--
-- An ordered claim (outbox.ClaimRequest.Ordered) takes an event only when
-- no earlier event of its topic and aggregate is pending or DEAD. Earlier
-- is by rowid, the order of the inserts; this index answers the question
-- with one probe (an index holds the rowid after its columns). Events
-- without an aggregate id are not ordered, so they are left out.

CREATE INDEX outbox_event_aggregate_idx ON outbox_event (topic, aggregate_type, aggregate_id)
    WHERE status <> 1 AND aggregate_id IS NOT NULL;
