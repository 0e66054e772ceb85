-- llm_calls: the append-only ledger of every LLM call (call id, prompt hash, request, raw response, parsed result, tokens, cost, error); segments written by the LLM gateway. A row is shown once even while a compaction interrupted by a crash has left it in two segments (until the next compaction drops the copy)
create or replace view llm_calls as
select distinct on (call_id, created_at) * from read_parquet({files}, union_by_name = true);
