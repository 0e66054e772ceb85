-- submissions: one row per chosen paper (paper_id = OpenReview forum id), with the normalised decision, its text and source (asset `submissions`, one Parquet file per venue partition)
create or replace view submissions as
select * from read_parquet({files}, union_by_name = true);
