-- chair_comments: official comments of area chairs, senior area chairs and program chairs, with their reply target and thread (asset `chair_comments`, one Parquet file per venue partition)
create or replace view chair_comments as
select * from read_parquet({files}, union_by_name = true);
