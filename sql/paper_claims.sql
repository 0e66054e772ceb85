-- paper_claims: PaperSourced claims written from drawn body paragraphs and rephrased, with gold chunk ids, section path and seed (asset `paper_claims`, one Parquet file per venue partition)
create or replace view paper_claims as
select * from read_parquet({files}, union_by_name = true);
