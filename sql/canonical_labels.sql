-- canonical_labels: per (claim, source) the agreed label or the applicable human decision, with provenance agreed / a_upheld / b_upheld / third_label / pending / unlabelled (asset `canonical_labels`, one Parquet file per venue partition)
create or replace view canonical_labels as
select * from read_parquet({files}, union_by_name = true);
