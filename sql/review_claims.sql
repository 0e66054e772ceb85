-- review_claims: atomic claims from each review section and reviewer follow-up, with id, source span, absorbed duplicates, extractor model, prompt hash and ledger call id (asset `review_claims`, one Parquet file per venue partition)
create or replace view review_claims as
select * from read_parquet({files}, union_by_name = true);
