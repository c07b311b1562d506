-- wmoutbox migration 2: the end of a claim's lease gets a column of its own,
-- for SQLite.
--
-- Written with the default table name, like migration 1.
--
-- Until now a claim moved available_at to the end of its lease, in a second
-- statement. A claim now records the end in locked_until and leaves
-- available_at alone, so that an event whose claim ends is due again in its
-- place, and a claim is one statement. This is the PostgreSQL store's
-- design, where it lets a claim rewrite its rows in place.
--
-- Relays of earlier versions do not read locked_until: stop them before
-- relays of this version claim on the same table. Claims they made before
-- (available_at moved to the end of their lease) are respected.

ALTER TABLE outbox_event ADD COLUMN locked_until INTEGER;
