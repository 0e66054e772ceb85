-- claim_threads: per review claim, the thread text its verifier sees in the `thread` prediction mode (asset `claim_threads`; for a venue imported from a release, its author responses), one Parquet file per venue partition
create or replace view claim_threads as
select * from read_parquet({files}, union_by_name = true);
