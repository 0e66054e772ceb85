-- raw_openreview_notes: every landed OpenReview note version exactly as received (note_json), one row per note version, `superseded` when a later version replaces it (asset `raw_openreview_notes`, one Parquet file per venue partition)
create or replace view raw_openreview_notes as
select * from read_parquet({files}, union_by_name = true);
