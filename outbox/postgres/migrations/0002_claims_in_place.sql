-- wmoutbox migration 2: claims rewrite their rows in place.
--
-- Written with the default table name, like migration 1.
--
-- Until now a claim moved available_at to the end of its lease. available_at
-- is a key of the due index, so every claim wrote a new row version on
-- another page, a new entry in both indexes, and the whole row to the
-- write-ahead log. The end of the lease gets a column of its own, which no
-- index holds, and every page keeps half its space free for one more version
-- of each of its rows (a claim rewrites every row of a page at once): a claim
-- is then a heap-only update on the row's own page, with no index entry and
-- with only the changed bytes logged. The fill factor applies to pages
-- written from now on.
--
-- Relays of earlier versions do not read locked_until: stop them before
-- relays of this version claim on the same table. Claims they made before
-- (available_at moved to the end of their lease) are respected.

ALTER TABLE outbox_event ADD COLUMN locked_until timestamptz;

ALTER TABLE outbox_event SET (fillfactor = 50);
