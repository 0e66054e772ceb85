-- claims_dropped: every dropped claim with its rule, every section whose extractor answer was unusable, every review or follow-up that yielded no claim with the reason (asset `claims_dropped`, one Parquet file per venue partition)
create or replace view claims_dropped as
select * from read_parquet({files}, union_by_name = true);
