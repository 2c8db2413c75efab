"""Feature inputs: TF's rules for reading a feature (`rules`) and their conversion into the fused
ops' CSR batches (`conversion`)."""
