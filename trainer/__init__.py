"""DeepSpeed trainer: prefix-tree merged CISPO on the ordered topic."""
