-- Each source's file name (its path without folders), as the export names the processes and tracks of a trace.
-- @column source_id   INTEGER  `sources.source_id`.
-- @column file        VARCHAR  The file name.
CREATE OR REPLACE TEMP VIEW export_perfetto_source_files AS
SELECT source_id, regexp_extract(path, '[^/\\]*$') AS file FROM sources;
