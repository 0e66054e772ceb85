-- citation_verdicts: per citance, cited paper and verifier the verdict with its explanation and the passages shown (asset `citation_verdicts`, one Parquet file per venue partition)
create or replace view citation_verdicts as
select * from read_parquet({files}, union_by_name = true);
