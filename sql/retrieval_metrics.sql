-- retrieval_metrics: Recall@1/5/10, nDCG@10, MRR@10 per retrieval configuration (asset `retrieval_metrics`, one Parquet file per venue partition)
create or replace view retrieval_metrics as
select * from read_parquet('{lake}/retrieval_metrics/*.parquet', union_by_name = true);
