-- retrieval_metrics: Recall@1/5/10 (hit@k: any relevant chunk in the top k), nDCG@10, MRR@10 per retrieval configuration and relevance mode (strict: chunks holding the gold evidence; section: any chunk of its section); claims without a manuscript count as misses, claims whose gold no chunk holds are counted apart (asset `retrieval_metrics`, one Parquet file per venue partition)
create or replace view retrieval_metrics as
select * from read_parquet({files}, union_by_name = true);
