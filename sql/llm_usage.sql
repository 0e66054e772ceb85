-- llm_usage: LLM calls, tokens, cost and failures behind the venue's tables (every role: extractor, fact tagger, labellers, verifiers) per model, role and prompt (asset `llm_usage`, one Parquet file per venue partition)
create or replace view llm_usage as
select * from read_parquet({files}, union_by_name = true);
