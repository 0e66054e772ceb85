-- parsed_manuscripts: per paper: logical blocks in reading order, with the parser, version and options that produced them (asset `parsed_manuscripts`, one Parquet file per venue partition)
create or replace view parsed_manuscripts as
select * from read_parquet({files}, union_by_name = true);
