-- Undoes wmoutbox migration 2: drops locked_until and resets the fill factor.

ALTER TABLE outbox_event RESET (fillfactor);

ALTER TABLE outbox_event DROP COLUMN locked_until;
