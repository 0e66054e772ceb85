-- evidence_verifications: per claim and verifier model, the label given the retrieved evidence (asset `evidence_verifications`, one Parquet file per venue partition)
create or replace view evidence_verifications as
select * from read_parquet('{lake}/evidence_verifications/*.parquet', union_by_name = true);
