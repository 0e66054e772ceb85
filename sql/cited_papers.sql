-- cited_papers: each bibliography entry resolved to a full text (library, the venue's manuscripts, arXiv, open access) or the reason it was not (asset `cited_papers`, one Parquet file per venue partition)
create or replace view cited_papers as
select * from read_parquet({files}, union_by_name = true);
