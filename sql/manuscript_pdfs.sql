-- manuscript_pdfs: per chosen paper: the stored PDF (sha256, pages, version) or why there is none (asset `manuscript_pdfs`, one Parquet file per venue partition)
create or replace view manuscript_pdfs as
select * from read_parquet({files}, union_by_name = true);
