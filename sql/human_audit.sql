-- human_audit: per audit-sample item, the two annotators' labels, their consensus (agreement, consensus decision or pending) and the automated canonical label against it: exact, within one ordinal step, polarity flip (asset `human_audit`, one Parquet file per venue partition)
create or replace view human_audit as
select * from read_parquet({files}, union_by_name = true);
