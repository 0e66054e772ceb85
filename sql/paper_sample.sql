-- paper_sample: the papers chosen per venue: seed, sample size, forum ids in draw order (asset `paper_sample`, one Parquet file per venue partition)
create or replace view paper_sample as
select * from read_parquet({files}, union_by_name = true);
