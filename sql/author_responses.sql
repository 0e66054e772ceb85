-- author_responses: author rebuttals and author official comments, with the review thread they answer (asset `author_responses`, one Parquet file per venue partition)
create or replace view author_responses as
select * from read_parquet({files}, union_by_name = true);
