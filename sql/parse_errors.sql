-- parse_errors: manuscripts that could not be parsed, with the reason (asset `parse_errors`, one Parquet file per venue partition)
create or replace view parse_errors as
select * from read_parquet({files}, union_by_name = true);
