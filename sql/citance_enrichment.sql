-- citance_enrichment: the optional LLM tagging of each citance: claim type, hedge level, the part the citation supports (asset `citance_enrichment`, one Parquet file per venue partition)
create or replace view citance_enrichment as
select * from read_parquet({files}, union_by_name = true);
