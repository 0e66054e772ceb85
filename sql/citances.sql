-- citances: every citation-bearing sentence of each manuscript's body, its markers resolved to bibliography entries (asset `citances`, one Parquet file per venue partition)
create or replace view citances as
select * from read_parquet({files}, union_by_name = true);
