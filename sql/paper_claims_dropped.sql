-- paper_claims_dropped: papers and drawn paragraphs that yielded no PaperSourced claim, with the reason (asset `paper_claims_dropped`, one Parquet file per venue partition)
create or replace view paper_claims_dropped as
select * from read_parquet({files}, union_by_name = true);
