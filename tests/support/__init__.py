"""Helpers the tests share (stores, servers, contracts, harnesses); no tests of their own."""
