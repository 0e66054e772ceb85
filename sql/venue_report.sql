-- venue_report: the PNG report figures of each venue and where they are (asset `venue_report`, one Parquet file per venue partition)
create or replace view venue_report as
select * from read_parquet({files}, union_by_name = true);
