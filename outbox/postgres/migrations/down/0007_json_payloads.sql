-- Undoes wmoutbox migration 7: moves the JSON payloads held in
-- payload_doc back into payload, as the bytes they were written as, then
-- drops payload_doc. The update rewrites those rows.

UPDATE outbox_event SET payload = convert_to(payload_doc::text, 'UTF8')
WHERE payload_doc IS NOT NULL;

ALTER TABLE outbox_event DROP COLUMN payload_doc;
