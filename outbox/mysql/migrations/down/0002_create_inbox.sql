-- Undoes wmoutbox migration 2: drops the inbox table, its index with it.

DROP TABLE IF EXISTS outbox_event_inbox;
