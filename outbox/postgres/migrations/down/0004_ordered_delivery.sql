-- Undoes wmoutbox migration 4: drops seq, which takes with it the
-- aggregate index over it and the sequence it owns (dropped by name too,
-- should it have been disowned).

ALTER TABLE outbox_event DROP COLUMN seq;

DROP SEQUENCE IF EXISTS outbox_event_seq;
