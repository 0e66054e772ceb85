-- decisions: program chairs' decisions (asset `decisions`, one Parquet file per venue partition)
create or replace view decisions as
select * from read_parquet({files}, union_by_name = true);
