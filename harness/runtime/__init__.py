"""The runtime: search state and the agents (the R-C-L-K SRAgent and the role agent built on it)."""
