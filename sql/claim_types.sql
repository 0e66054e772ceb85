-- claim_types: each review claim tagged factual or subjective by the fact_tagger role, with rationale and call id (asset `claim_types`, one Parquet file per venue partition)
create or replace view claim_types as
select * from read_parquet({files}, union_by_name = true);
