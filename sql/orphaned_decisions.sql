-- orphaned_decisions: human decisions (arbitration, audit, consensus) whose claim is no longer among the venue's review claims, because its text changed when the claims were extracted again; the decisions stay in the ledger (asset `orphaned_decisions`, one Parquet file per venue partition)
create or replace view orphaned_decisions as
select * from read_parquet({files}, union_by_name = true);
