-- predictions: per venue x configuration (configurations.yaml), claim and verifier model, the label given what the configuration shows the verifier (top-k passages, the whole manuscript, or the gold chunks), or (status no_manuscript / no_evidence / too_long) why no call was made (asset `predictions`, one Parquet file per venue x configuration partition)
create or replace view predictions as
select * from read_parquet({files}, union_by_name = true);
