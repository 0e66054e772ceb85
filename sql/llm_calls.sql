-- llm_calls: the append-only ledger of every LLM call (call id, prompt hash, request, raw response, parsed result, tokens, cost, error); segments written by the LLM gateway
create or replace view llm_calls as
select * from read_parquet({files}, union_by_name = true);
