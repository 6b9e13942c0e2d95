"""Pieces of `bench/compare`: starting and stopping services, the peer gateways, the
scenarios, and the tables and chart made from the results. Standard library only."""
