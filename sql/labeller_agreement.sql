-- labeller_agreement: labeller A vs B per source and claim type: raw agreement, Cohen's kappa, the 4x4 table, parse failures apart (asset `labeller_agreement`, one Parquet file per venue partition)
create or replace view labeller_agreement as
select * from read_parquet({files}, union_by_name = true);
