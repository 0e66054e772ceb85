-- token_costs: per venue, verifier and prediction configuration: claims called, tokens in/out, tokens per claim, and the ratio of the verifier's full-context tokens per claim to them over the claims both called (asset `token_costs`, one Parquet file per venue partition)
create or replace view token_costs as
select * from read_parquet({files}, union_by_name = true);
