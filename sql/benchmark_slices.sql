-- benchmark_slices: the six benchmark slices, one row per (slice, claim) with the gold label, its source and provenance, and the call / decision ids behind it (asset `benchmark_slices`, one Parquet file per venue partition)
create or replace view benchmark_slices as
select * from read_parquet({files}, union_by_name = true);
