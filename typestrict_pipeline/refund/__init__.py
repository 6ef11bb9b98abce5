"""The refund calculation: split, metrics, paired bootstrap, the rule, the audit."""
