-- Rejected input records per source and reason, for the report's account of what each input contributed:
-- how many, and where the first one was (line, byte offset or record index), so a reader can find it.
-- @column source_id      INTEGER  The source.
-- @column reason         VARCHAR  Why the records were rejected.
-- @column records        BIGINT   Records rejected for this reason.
-- @column first_line     BIGINT   Line of the first such record (NULL for non-line inputs).
-- @column first_offset   BIGINT   Byte offset of the first such record (NULL when not applicable).
-- @column first_record   BIGINT   Record index of the first such record (NULL when not applicable).
-- @column example_raw    VARCHAR  The first such record's raw text (truncated to 512 characters; may hold prompt text).
CREATE OR REPLACE TEMP VIEW report_rejects AS
SELECT source_id, reason, count(*) AS records, min(line_no) AS first_line, min(byte_offset) AS first_offset,
       min(record_index) AS first_record,
       arg_min(raw, coalesce(line_no, byte_offset, record_index, 0)) AS example_raw
FROM rejects GROUP BY source_id, reason ORDER BY source_id, records DESC, reason;
