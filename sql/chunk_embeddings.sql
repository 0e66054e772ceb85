-- chunk_embeddings: one L2-normalised vector per chunk, with the embedding model id (asset `chunk_embeddings`, one Parquet file per venue partition)
create or replace view chunk_embeddings as
select * from read_parquet('{lake}/chunk_embeddings/*.parquet', union_by_name = true);
