-- public_comments: public comments, with their reply target and thread (asset `public_comments`, one Parquet file per venue partition)
create or replace view public_comments as
select * from read_parquet({files}, union_by_name = true);
