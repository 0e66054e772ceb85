-- retrieval_metrics: Recall@1/5/10, nDCG@10, MRR@10 per retrieval configuration; claims without a manuscript count as misses (asset `retrieval_metrics`, one Parquet file per venue partition)
create or replace view retrieval_metrics as
select * from read_parquet({files}, union_by_name = true);
