-- citation_evidence: per citance and cited paper the top passages of the cited paper (sentence windows or the whole paper) (asset `citation_evidence`, one Parquet file per venue partition)
create or replace view citation_evidence as
select * from read_parquet({files}, union_by_name = true);
