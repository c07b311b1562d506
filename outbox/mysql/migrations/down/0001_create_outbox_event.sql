-- Undoes wmoutbox migration 1: drops the outbox table, its indexes with it.
-- IF EXISTS, as MySQL commits each DDL statement on its own: a down
-- migration cut short can run again.

DROP TABLE IF EXISTS outbox_event;
