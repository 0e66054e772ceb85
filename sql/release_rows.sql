-- release_rows: every row a release import took (peerify import-release), with its file and line, raw and mapped labels, evidence and the line as written, one Parquet file per imported venue
create or replace view release_rows as
select * from read_parquet({files}, union_by_name = true);
