-- reviews: official reviews: every content field as a column, integer <field>_score columns for the numeric fields, ethics flags as a list, plus the assembled review_text (asset `reviews`, one Parquet file per venue partition)
create or replace view reviews as
select * from read_parquet({files}, union_by_name = true);
