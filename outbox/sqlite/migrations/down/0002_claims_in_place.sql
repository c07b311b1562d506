-- Undoes wmoutbox migration 2: drops locked_until (SQLite 3.35 or later).

ALTER TABLE outbox_event DROP COLUMN locked_until;
