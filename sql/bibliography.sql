-- bibliography: one row per reference entry of each manuscript, its fields and how each was found (asset `bibliography`, one Parquet file per venue partition)
create or replace view bibliography as
select * from read_parquet({files}, union_by_name = true);
