-- evidence_verifications: per claim and verifier model, the label given the retrieved evidence, or (status no_manuscript / no_evidence) why no call was made (asset `evidence_verifications`, one Parquet file per venue partition)
create or replace view evidence_verifications as
select * from read_parquet({files}, union_by_name = true);
