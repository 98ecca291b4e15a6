-- A run's events committed together are one row: `seq` is the first one's, `last_seq` the
-- last one's, and `record` a JSON array of them. A row without `last_seq` holds one event,
-- as every row did before. One row per burst instead of one per event is most of what a
-- run costs the database.
ALTER TABLE events ADD COLUMN last_seq bigint;
-- A span of a few KiB stays whole in its row, uncompressed: compressing it cost more than
-- the rows it replaces.
ALTER TABLE events SET (toast_tuple_target = 8160);
-- Which replicas read spans. A release before this one does not (its rows default to
-- false), so spans are written only while every live replica reads them; the first time
-- they are, the schema's minimum version is raised, so such a release is refused at start
-- instead of misreading them.
ALTER TABLE replicas ADD COLUMN reads_spans boolean NOT NULL DEFAULT false;
