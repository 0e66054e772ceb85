-- submissions: one row per chosen paper (paper_id = OpenReview forum id) (asset `submissions`, one Parquet file per venue partition)
create or replace view submissions as
select * from read_parquet('{lake}/submissions/*.parquet', union_by_name = true);
