"""Verifier worker processes: the trusted judge (problem, inputs, reference, comparison) and
the disposable candidate (imports untrusted ModelNew, runs it, times it). They speak the
protocol of docs/verifier-protocol.md on fd 3/4; nothing here imports the C++ extension."""
