-- reference_checks: each bibliography entry against Crossref / OpenAlex / Semantic Scholar records: validated, suspicious or unvalidatable with the evidence (asset `reference_checks`, one Parquet file per venue partition)
create or replace view reference_checks as
select * from read_parquet({files}, union_by_name = true);
