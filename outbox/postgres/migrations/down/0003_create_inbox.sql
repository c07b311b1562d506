-- Undoes wmoutbox migration 3: drops the inbox table, its index with it.

DROP TABLE outbox_event_inbox;
