-- arbitration_queue: every (claim, source) where the two labellers disagree or either failed to parse, candidates anonymised in a seeded per-record order (an unparsed answer with its raw answer text) (asset `arbitration_queue`, one Parquet file per venue partition); the candidate-to-labeller mapping (arbitration_key) has no view on purpose
create or replace view arbitration_queue as
select * from read_parquet({files}, union_by_name = true);
