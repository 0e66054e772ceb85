-- reviewer_followups: reviewer comments that are not the original review (asset `reviewer_followups`, one Parquet file per venue partition)
create or replace view reviewer_followups as
select * from read_parquet({files}, union_by_name = true);
