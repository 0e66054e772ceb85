-- forum_crawl_log: per chosen forum: fetched, resumed from the snapshot, or failed with a reason (asset `forum_crawl_log`, one Parquet file per venue partition)
create or replace view forum_crawl_log as
select * from read_parquet({files}, union_by_name = true);
