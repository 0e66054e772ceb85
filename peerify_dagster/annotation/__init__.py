"""Human decisions: the decisions ledger, the audit sample, and annotators' sessions over a venue's open items."""
