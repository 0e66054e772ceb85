-- status_notes: withdrawal and desk-rejection notes and their reversals (asset `status_notes`, one Parquet file per venue partition)
create or replace view status_notes as
select * from read_parquet({files}, union_by_name = true);
