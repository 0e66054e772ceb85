-- reviews: official reviews: every content field as a column plus the assembled review_text (asset `reviews`, one Parquet file per venue partition)
create or replace view reviews as
select * from read_parquet('{lake}/reviews/*.parquet', union_by_name = true);
