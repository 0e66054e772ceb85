-- ingest_errors: every ingestion problem, naming the forum/note, stage and reason (asset `ingest_errors`, one Parquet file per venue partition)
create or replace view ingest_errors as
select * from read_parquet({files}, union_by_name = true);
