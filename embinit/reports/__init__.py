"""Stage 5, reports (rules/reports.smk): the paper's tables and figure, and ours beside the paper's."""
