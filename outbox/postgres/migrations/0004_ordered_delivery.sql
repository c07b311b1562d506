-- wmoutbox migration 4: the order events were written in, for ordered
-- delivery per aggregate.
--
-- Written with the default table name, like migrations 1 to 3; the
-- sequence is in the table's schema.
--
-- seq numbers events in the order their inserts ran: a sequence, so that
-- the numbers of one aggregate's events follow the order of the
-- transactions that wrote them across processes whatever their clocks say
-- (event ids are ULIDs, ordered by each writer's clock). An ordered claim
-- (outbox.ClaimRequest.Ordered) takes an event only when no earlier event
-- of its topic and aggregate is pending or DEAD: the first event of each
-- aggregate in the aggregate index.
--
-- The column comes without a default first, so that adding it does not
-- rewrite the table; the default then applies to rows written from now
-- on, and the rows an ordered claim can meet (every one not DONE) are
-- numbered here in write order. DONE rows keep no number: no claim asks.
-- Keep the sequence's CACHE at 1: cached numbers are handed out per
-- session, out of order across sessions.

ALTER TABLE outbox_event ADD COLUMN seq bigint;

CREATE SEQUENCE outbox_event_seq OWNED BY outbox_event.seq;

ALTER TABLE outbox_event ALTER COLUMN seq SET DEFAULT nextval('outbox_event_seq');

-- The default runs with the privileges of the role that inserts: every
-- role that may write events needs the sequence, as it would an identity
-- column's, and writers' roles granted INSERT before this migration keep
-- working. Another role's nextval can only leave a gap, which orders
-- nothing differently; setting the sequence needs UPDATE, not granted.
GRANT USAGE ON SEQUENCE outbox_event_seq TO PUBLIC;

UPDATE outbox_event AS o SET seq = n.seq
FROM (SELECT event_id, row_number() OVER (ORDER BY created_at, event_id) AS seq
      FROM outbox_event WHERE status <> 1) AS n
WHERE o.event_id = n.event_id;

SELECT setval('outbox_event_seq', coalesce(max(seq), 0) + 1, false) FROM outbox_event;

-- The ordered claim's walk: the events not DONE of each aggregate of a
-- topic, in write order, so that the first of each is one descent away.
-- An event without an aggregate id (NULL, or '' written by another
-- program) is an aggregate of its own. Byte order (COLLATE "C") lets the
-- relay compute where a claim ended.
CREATE INDEX outbox_event_aggregate_idx ON outbox_event
    (topic COLLATE "C", aggregate_type COLLATE "C", (nullif(aggregate_id, '') IS NULL),
     (coalesce(nullif(aggregate_id, ''), event_id)) COLLATE "C", seq)
    WHERE status <> 1;
