-- review_threads: per review: its author responses (any depth, time order) and the paper's combined response (asset `review_threads`, one Parquet file per venue partition)
create or replace view review_threads as
select * from read_parquet({files}, union_by_name = true);
