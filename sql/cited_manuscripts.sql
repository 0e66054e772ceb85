-- cited_manuscripts: the cited papers' PDFs parsed by the manuscript parser, one row per stored PDF (asset `cited_manuscripts`, one Parquet file per venue partition)
create or replace view cited_manuscripts as
select * from read_parquet({files}, union_by_name = true);
