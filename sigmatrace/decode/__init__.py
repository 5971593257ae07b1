"""Decoders: names of verbs / mlx5 / cxi codes, and vectorised parsers of recorded data."""
