-- citation_metrics: the citation half's figures per stage beside RefVerifier's published ones (asset `citation_metrics`, one Parquet file per venue partition)
create or replace view citation_metrics as
select * from read_parquet({files}, union_by_name = true);
