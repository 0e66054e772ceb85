-- chunk_embeddings: one L2-normalised vector per chunk, with the embedding model id (asset `chunk_embeddings`, one Parquet file per venue partition)
create or replace view chunk_embeddings as
select * from read_parquet({files}, union_by_name = true);
