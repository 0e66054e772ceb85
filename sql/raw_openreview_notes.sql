-- raw_openreview_notes: every landed OpenReview note exactly as received (note_json), one row per note (asset `raw_openreview_notes`, one Parquet file per venue partition)
create or replace view raw_openreview_notes as
select * from read_parquet('{lake}/raw_openreview_notes/*.parquet', union_by_name = true);
