-- meta_reviews: area chairs' meta-reviews (asset `meta_reviews`, one Parquet file per venue partition)
create or replace view meta_reviews as
select * from read_parquet({files}, union_by_name = true);
