-- metrics: per venue, prediction configuration, verifier and benchmark slice: accuracy and macro-F1 with parse failures, uncalled and missing claims counted as errors, beside the slice's majority-class baseline (majority_label, majority_accuracy, majority_macro_f1), per-class precision/recall/F1, confusion matrix, predicted-label distribution, parse-failure rate, tokens per claim (asset `metrics`, one Parquet file per venue partition)
create or replace view metrics as
select * from read_parquet({files}, union_by_name = true);
