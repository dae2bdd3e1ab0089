"""Evaluation and analysis for PageSum: ROUGE scoring, baselines and the paper's plots."""
