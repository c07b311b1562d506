-- Undoes wmoutbox migration 1: drops the outbox table, its indexes with it.

DROP TABLE outbox_event;
