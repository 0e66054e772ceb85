-- claim_labels: per review claim, source (thread | manuscript) and labeller (a | b): the label, what the labeller saw as evidence, its quotes and the ledger call id (asset `claim_labels`, one Parquet file per venue partition)
create or replace view claim_labels as
select * from read_parquet({files}, union_by_name = true);
