-- note_errors: notes that could not be used, with the reason (asset `note_errors`, one Parquet file per venue partition)
create or replace view note_errors as
select * from read_parquet({files}, union_by_name = true);
