-- chunks: section-aware retrieval units (paragraph, caption, table, appendix, reference) with stable ids (asset `chunks`, one Parquet file per venue partition)
create or replace view chunks as
select * from read_parquet({files}, union_by_name = true);
