-- retrieval_queries: claims to retrieve evidence for, with gold evidence sentences where an answer key exists (asset `retrieval_queries`, one Parquet file per venue partition)
create or replace view retrieval_queries as
select * from read_parquet({files}, union_by_name = true);
