-- chunk_stats: chunk size distribution per venue (median / mean / p90 words, empty and runaway chunks) (asset `chunk_stats`, one Parquet file per venue partition)
create or replace view chunk_stats as
select * from read_parquet({files}, union_by_name = true);
