-- retrieval_runs: per claim and retrieval configuration: ranked top-k chunk ids with scores (or why none) (asset `retrieval_runs`, one Parquet file per venue partition)
create or replace view retrieval_runs as
select * from read_parquet({files}, union_by_name = true);
